"""What must not hang, leak or silently misbehave (the first review's findings)."""

from __future__ import annotations

import contextlib
import gc
import os
import threading
import weakref
from typing import Any

import anyio
import numpy as np
import pytest

import eagerrt as ert
from eagerrt.lowlevel import AsyncValue, AsyncValueStateError, IndirectAsyncValue

HUGE_COST = 1e15


def _slow_op(name: str, kernel: Any) -> ert.Op:
    op = ert.define_op(
        name, rule=lambda x: (x.shape, x.dtype), cost=lambda *a, **k: HUGE_COST, replace=True
    )
    op.register_kernel("generic", kernel)
    return op


def test_a_tensor_passed_by_keyword_is_an_operand_not_a_static_parameter(gate) -> None:
    g = gate()
    indices = g(np.array([2, 0]))  # pending until the gate opens
    got = ert.take.op(ert.asarray([10, 20, 30]), indices=indices)  # the op form
    assert not got.is_ready()  # it waits for its operand instead of blocking a worker
    g.open()
    assert got.numpy(timeout=10).tolist() == [30, 10]
    assert ert.add(ert.ones(2), y=ert.ones(2)).numpy().tolist() == [2.0, 2.0]
    with pytest.raises(ert.DTypeError, match="static parameter"):
        ert.sum(ert.ones(2), keepdims=ert.ones(1))
    with pytest.raises(ert.DTypeError, match="multiple values"):
        ert.take.op(ert.ones(2), ert.asarray([0]), indices=ert.asarray([1]))


def test_a_kernel_raising_a_base_exception_still_completes_its_result() -> None:
    class Stop(BaseException):
        pass

    def kernel(x: np.ndarray) -> np.ndarray:
        raise Stop

    t = _slow_op("robust_base_exception", kernel)(ert.ones(2))
    assert t.wait(10)
    with pytest.raises(ert.KernelError) as info:
        t.numpy()
    assert isinstance(info.value.__cause__, Stop)
    assert ert.stats().pending_values == 0


@pytest.mark.parametrize("log", [False, True])
def test_fused_softmax_gives_nan_for_a_fully_masked_row_like_numpy(log: bool) -> None:
    x = np.zeros((2, 32))
    x[1] = -np.inf
    op = ert.log_softmax if log else ert.softmax
    got = op(ert.asarray(x), axis=-1).numpy()
    assert np.isnan(got[1]).all()
    np.testing.assert_allclose(got[0], np.log(np.full(32, 1 / 32)) if log else 1 / 32)


@pytest.mark.anyio
async def test_overlapping_sync_mode_blocks_in_concurrent_tasks_leave_it_off() -> None:
    first_in, second_in = anyio.Event(), anyio.Event()

    async def first() -> None:
        with ert.sync_mode():
            first_in.set()
            await second_in.wait()
        # second's block is still open here: sync mode holds until it closes
        assert ert.config.sync_active

    async def second() -> None:
        await first_in.wait()
        with ert.sync_mode():
            second_in.set()
            await anyio.sleep(0.01)

    async with anyio.create_task_group() as tg:
        tg.start_soon(first)
        tg.start_soon(second)
    assert not ert.config.sync_active
    assert ert.config.inline_limit_ns == ert.config.inline_threshold_ns


def test_an_unread_failure_does_not_keep_its_inputs_alive() -> None:
    def kernel(x: np.ndarray) -> np.ndarray:
        raise ValueError("boom")

    op = _slow_op("robust_unread_failure", kernel)
    data = np.ones(1000)
    x = ert.asarray(data)
    alive = weakref.ref(data)
    result = op(x)
    assert result.wait(10)
    del x, result, data
    gc.collect()
    try:
        assert alive() is None, "the failure's traceback still holds the kernel's input"
    finally:
        with contextlib.suppress(ert.KernelError, ert.EagerErrorGroup):
            ert.synchronize(timeout=10)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_work_in_flight_at_fork_fails_in_the_child_instead_of_hanging() -> None:
    release = threading.Event()

    def kernel(x: np.ndarray) -> np.ndarray:
        release.wait(30)
        return x

    running = _slow_op("robust_fork", kernel)(ert.ones(2))
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            try:
                ert.synchronize(timeout=5)
                os.write(write, b"no error")
            except ert.KernelError as err:
                os.write(write, b"ok" if "forked" in str(err) else b"other error")
            except BaseException:
                os.write(write, b"hung or crashed")
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    answer = os.read(read, 64)
    os.close(read)
    release.set()
    assert answer == b"ok"
    assert running.numpy(timeout=10).tolist() == [1.0, 1.0]  # the parent's copy is fine


@pytest.mark.anyio
async def test_cancelled_awaits_do_not_pile_up_waiters(gate) -> None:
    g = gate()
    t = g()
    for _ in range(200):
        with anyio.move_on_after(0.0001):
            await t
    assert len(t._waiters or []) <= 2  # the scheduler's own bookkeeping at most
    g.open()
    assert t.numpy(timeout=10).tolist() == [0.0, 1.0, 2.0]


def test_forward_to_takes_one_source() -> None:
    indirect, a, b = IndirectAsyncValue(), AsyncValue(), AsyncValue()
    indirect.forward_to(a)
    with pytest.raises(AsyncValueStateError, match="already forwarded"):
        indirect.forward_to(b)
    a.set_value(1)
    assert indirect.value == 1


def test_tensors_are_completed_only_by_their_op_and_value_is_read_only() -> None:
    x = ert.asarray(np.arange(3.0)) + 0
    assert not x.value.flags.writeable
    with pytest.raises(ValueError):
        x.value[0] = 99
    with pytest.raises(ert.UsageError):
        x.set_value(np.zeros(3))
    with pytest.raises(ert.UsageError):
        x.set_error(RuntimeError())
    bad = ert.take(ert.arange(2), ert.asarray([5]))
    with pytest.raises(ert.KernelError):
        _ = bad.value


def test_a_user_kernel_returning_a_list_feeds_other_ops() -> None:
    op = ert.define_op("robust_list_kernel", rule=lambda x: ((2, 2), x.dtype), replace=True)
    op.register_kernel("cpu", lambda x: [[1.0, 0.0], [0.0, 1.0]])
    eye = op(ert.ones(1))
    for _ in range(2):  # the general path, then the fast path's specialized matmul
        assert (eye @ eye).numpy().tolist() == [[1.0, 0.0], [0.0, 1.0]]


def test_a_kernel_registered_while_a_call_is_in_flight_is_not_undone() -> None:
    op = ert.define_op("robust_swap_race", rule=lambda x: (x.shape, x.dtype), replace=True)
    entered, proceed = threading.Event(), threading.Event()
    op.register_kernel("generic", lambda x: x + 1)

    def slow_cost(shape: Any, dtype: Any, /, *args: Any) -> float:
        if threading.current_thread().name == "racer":
            entered.set()
            proceed.wait(10)
        return 0.0

    op.cost = slow_cost
    racer = threading.Thread(target=lambda: op(ert.ones(1)), name="racer")
    racer.start()
    assert entered.wait(10)
    op.register_kernel("cpu", lambda x: x + 100)  # lands between lookup and caching
    proceed.set()
    racer.join(10)
    assert op(ert.ones(1)).numpy().tolist() == [101.0]
    assert op(ert.ones(1)).numpy().tolist() == [101.0]  # and from the fast path


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: ert.round(2.5), None),
        (lambda: ert.sum(3.0), None),
        (lambda: ert.full_like([1, 2], 0), None),
        (lambda: ert.arange(6).reshape(2.0, 3.0), ert.DTypeError),
        (lambda: ert.linspace(0, 1, 2.5), ert.DTypeError),
        (lambda: ert.eye(2, k="a"), ert.DTypeError),
        (lambda: ert.full((3,), 300, dtype="int8"), ert.ValueRangeError),
        (lambda: ert.random.uniform(3, seed=-1), ert.ArgumentError),
        (lambda: ert.random.normal(3, std=-1.0), ert.ArgumentError),
        (lambda: ert.full((3,), [1, 2]), ert.ShapeError),
        (lambda: ert.sum(ert.ones((2, 2)), axis=[0, 1]), ert.DTypeError),
        (lambda: ert.sum(ert.ones(2), axis=3), IndexError),
        (lambda: ert.random.normal(3, mean="a"), ert.DTypeError),
        (
            lambda: ert.tensordot(ert.ones((2, 2)), ert.ones((2, 2)), axes=([0, 0], [0, 1])),
            ert.ShapeError,
        ),
        (lambda: ert.split(ert.arange(4), [1.5]), ert.DTypeError),
        (lambda: ert.zeros(3, dtype=object), ert.DTypeError),
        (lambda: ert.arange(3).astype("U3"), ert.DTypeError),
        (lambda: ert.std(ert.ones((2, 2)), axis=0, dtype="int16"), ert.DTypeError),
    ],
)
def test_bad_arguments_fail_at_the_call(call: Any, error: type[Exception] | None) -> None:
    if error is None:
        call().numpy()  # scalars and lists are accepted where a tensor is expected
        return
    with pytest.raises(error) as info:
        call()
    assert "test_robustness.py" in str(info.value) or error is not ert.ShapeError


def test_numpy_reductions_take_numpy_dtypes() -> None:
    data = np.arange(6, dtype=np.int8).reshape(2, 3)
    t = ert.asarray(data)
    for name in ("sum", "prod", "mean", "var", "std"):
        for dtype in (np.int16, np.float32, np.complex64):
            try:
                want = getattr(np, name)(data, axis=0, dtype=dtype)
            except TypeError:
                continue
            got = getattr(np, name)(t, axis=0, dtype=dtype)
            assert isinstance(got, ert.Tensor)
            assert got.dtype == want.dtype == got.numpy().dtype
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


# -- second review ---------------------------------------------------------------------
def _fail_inline_holding(big: np.ndarray) -> ert.Tensor:
    op = ert.get_op("robust_inline_failure")
    return op(ert.asarray(np.ones(2)))


def test_an_unread_inline_failure_does_not_keep_the_callers_stack_alive() -> None:
    op = ert.define_op("robust_inline_failure", rule=lambda x: (x.shape, x.dtype), replace=True)
    op.register_kernel("generic", lambda x: 1 / 0)
    big = np.ones(1000)
    alive = weakref.ref(big)
    result = _fail_inline_holding(big)
    assert result.is_ready()  # inline
    del big, result
    gc.collect()
    try:
        assert alive() is None, "the unread failure keeps its caller's frame (and locals)"
    finally:
        with contextlib.suppress(ert.KernelError, ert.EagerErrorGroup):
            ert.synchronize(timeout=10)


def test_kernels_that_wait_on_offloaded_work_do_not_starve_the_pool() -> None:
    inner = _slow_op("robust_inner", lambda x: x + 1)

    def outer_kernel(x: np.ndarray) -> np.ndarray:
        return inner(ert.asarray(x)).numpy(timeout=20)  # blocks a worker

    outer = _slow_op("robust_outer", outer_kernel)
    # More blocking kernels than workers: each must help run the queued inner ops.
    results = [outer(ert.full((2,), float(i))) for i in range(3 * ert.config.num_threads)]
    assert [r.numpy(timeout=30).tolist() for r in results] == [
        [i + 1.0, i + 1.0] for i in range(3 * ert.config.num_threads)
    ]


def test_synchronize_inside_a_kernel_is_refused_instead_of_waiting_for_itself() -> None:
    def kernel(x: np.ndarray) -> np.ndarray:
        ert.synchronize(timeout=5)
        return x

    t = _slow_op("robust_sync_inside", kernel)(ert.ones(2))
    with pytest.raises(ert.KernelError) as info:
        t.numpy(timeout=10)
    assert isinstance(info.value.__cause__, ert.UsageError)
    assert "inside a kernel" in str(info.value.__cause__)


def test_a_waiting_continuation_reaches_a_later_waiter_of_the_same_value() -> None:
    trigger, produced = AsyncValue(), AsyncValue()
    seen: list[object] = []
    trigger.and_then(lambda: seen.append(produced.wait(5) and produced.value))
    trigger.and_then(lambda: produced.set_value("made by the second waiter"))
    trigger.set_value(None)
    assert seen == ["made by the second waiter"]


def test_a_kernel_that_returns_a_tensor_gives_its_data() -> None:
    op = ert.define_op("robust_tensor_kernel", rule=lambda x: (x.shape, x.dtype), replace=True)
    op.register_kernel("cpu", lambda x: ert.asarray(x) * 2)
    doubled = op(ert.asarray([1.0, 2.0]))
    assert (doubled + 1).numpy().tolist() == [3.0, 5.0]


def test_timed_out_blocking_waits_do_not_pile_up_waiters(gate) -> None:
    g = gate()
    t = g()
    for _ in range(100):
        assert not t.wait(0.0001)
        with pytest.raises(ert.WaitTimeoutError):
            t.numpy(timeout=0.0001)
    assert len(t._waiters or []) <= 2
    g.open()
    assert t.wait(10)


def test_operands_by_keyword_follow_numpy_for_elementwise_ops() -> None:
    x = ert.ones((2, 3))
    got = ert.add(x, y=np.ones((2, 3)))
    assert got.shape == (2, 3) and got.numpy().tolist() == [[2.0] * 3] * 2
    with pytest.raises(ert.DTypeError):
        ert.add(x, 1, 2)


def test_reductions_bind_positional_arguments_in_numpys_order() -> None:
    """The functions take the standard's keyword-only options; their ops (``fn.op``)
    bind positional arguments in numpy's order, and numpy's own functions work."""
    data = np.arange(6, dtype=np.int8).reshape(2, 3)
    want = np.sum(data, 0, "float32")
    for got in (
        ert.sum.op(ert.asarray(data), 0, "float32"),
        np.sum(ert.asarray(data), 0, "float32"),
    ):
        assert (got.shape, got.dtype) == (want.shape, want.dtype)
        np.testing.assert_array_equal(got.numpy(), want)
    np.testing.assert_allclose(
        ert.var.op(ert.asarray(data), 0, None, None, 1).numpy(),
        np.var(data, 0, ddof=1),
    )
    with pytest.raises(TypeError):
        ert.sum(ert.asarray(data), 0)  # the standard's axis is keyword-only


def test_an_indirect_value_refuses_a_direct_result_once_forwarded() -> None:
    indirect, source = IndirectAsyncValue(), AsyncValue()
    indirect.forward_to(source)
    with pytest.raises(AsyncValueStateError):
        indirect.set_value(1)
    source.set_value(2)
    assert indirect.value == 2


def test_a_failure_raised_while_handling_another_keeps_no_frames() -> None:
    def kernel(x: np.ndarray) -> np.ndarray:
        lookup: dict[str, np.ndarray] = {}
        try:
            return lookup["missing"]
        except KeyError:  # the ValueError's __context__ holds the KeyError's frames
            raise ValueError("raised while handling another")  # noqa: B904

    op = _slow_op("robust_context_chain", kernel)
    data = np.ones(1000)
    alive = weakref.ref(data)
    result = op(ert.asarray(data))
    assert result.wait(10)
    del result, data
    gc.collect()
    try:
        assert alive() is None, "the exception's __context__ keeps the kernel's frames"
    finally:
        with contextlib.suppress(ert.KernelError, ert.EagerErrorGroup):
            ert.synchronize(timeout=10)
