"""Writes (``t[i] = v``, ``t += x``) under asynchronous execution.

A write is ordered after every earlier reader of the tensor and before every
later one (MXNet's read/write dependencies), whatever is pending when: the
tensor itself, its readers, the written value or the index.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import eagerrt as ert
from conftest import Gate, ManualDevice


def values(t: ert.Tensor) -> list[Any]:
    return t.numpy(timeout=10).tolist()


# -- the fast path: everything ready -----------------------------------------------------
def test_setitem_on_a_ready_tensor_happens_at_once() -> None:
    t = ert.zeros(5, dtype=ert.int64)
    t[1] = 3
    t[2:4] = ert.asarray([7, 8])
    t[ert.asarray([0, 4])] = 9
    assert t.is_ready()
    assert values(t) == [9, 3, 7, 8, 9]


def test_tensors_have_value_semantics() -> None:
    """Earlier results, views and handed-out arrays keep the values they had."""
    t = ert.arange(4)
    view = t[1:3]
    copy = t + 0
    array = t.numpy()
    t[1] = 100
    t += 1
    assert values(t) == [1, 101, 3, 4]
    assert values(view) == [1, 2]
    assert values(copy) == [0, 1, 2, 3]
    assert array.tolist() == [0, 1, 2, 3]


def test_inplace_operators_keep_identity_and_dtype() -> None:
    t = ert.ones((2, 2), dtype=ert.float32)
    alias = t
    t += 1
    t *= ert.full((2,), 3.0, dtype=ert.float64)  # same kind: cast back, as numpy does
    t -= 0.5
    t /= 2
    t **= 2
    t @= ert.eye(2, dtype=ert.float32)
    assert alias is t and t.dtype == ert.float32
    np.testing.assert_allclose(values(t), np.full((2, 2), ((2 * 3 - 0.5) / 2) ** 2))
    i = ert.asarray([5, 6], dtype=ert.int8)
    i //= 2
    i %= 2
    i |= 4
    i &= 6
    i ^= 1
    i <<= 1
    i >>= 1
    assert i.dtype == ert.int8 and values(i) == [5, 5]  # [2,3] [0,1] [4,5] [4,4] [5,5]


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda t: t.__setitem__(0, 1.5), ert.DTypeError),  # float into int
        (lambda t: t.__setitem__(0, 2**40), ert.ValueRangeError),
        (lambda t: t.__setitem__(slice(0, 2), ert.ones(3, dtype=ert.int32)), ert.ShapeError),
        (lambda t: t.__setitem__(7, 1), IndexError),
        (lambda t: t.__setitem__("a", 1), ert.DTypeError),
        (lambda t: t.__setitem__(ert.asarray([True, False]), 1), IndexError),  # mask shape
        (lambda t: t.__iadd__(ert.ones((2, 4), dtype=ert.int32)), ert.ShapeError),
        (lambda t: t.__iadd__(1.5), ert.DTypeError),  # int32 += float would lose the kind
    ],
)
def test_bad_writes_fail_at_the_call_and_leave_the_tensor(
    make: Callable[[ert.Tensor], Any], error: type[Exception]
) -> None:
    t = ert.arange(4, dtype=ert.int32)
    with pytest.raises(error) as info:
        make(t)
    assert "test_writes.py" in str(info.value)  # names the user's line
    assert values(t) == [0, 1, 2, 3]


# -- ordering against pending work ---------------------------------------------------------
def test_write_waits_for_an_earlier_pending_reader(gate: Callable[[], Gate]) -> None:
    g = gate()
    t = ert.asarray([1.0, 2.0, 3.0])
    earlier = t + g()  # pending: reads t's first version when the gate opens
    t[0] = 100.0
    later = t * 1
    assert not t.is_ready()  # the write waits for `earlier`
    g.open()
    assert values(earlier) == [1.0, 3.0, 5.0]
    assert values(later) == [100.0, 2.0, 3.0]
    assert values(t) == [100.0, 2.0, 3.0]


def test_write_to_a_pending_tensor_splits_its_readers(gate: Callable[[], Gate]) -> None:
    g = gate()
    t = g()  # [0, 1, 2], pending
    first = t * 1
    t[0] = 10.0
    second = t * 1
    t[1] += 20.0  # a read (t[1]) and a write, both queued
    third = t * 1
    g.open()
    assert values(first) == [0.0, 1.0, 2.0]
    assert values(second) == [10.0, 1.0, 2.0]
    assert values(third) == [10.0, 21.0, 2.0]
    assert values(t) == [10.0, 21.0, 2.0]


def test_a_pending_tensor_written_into_itself(gate: Callable[[], Gate]) -> None:
    # Found by the random DAG fuzzer: the write waited for `t` itself, which
    # stays pending until that very write is done: a deadlock.
    g = gate()
    t = g()  # [0, 1, 2], pending
    t[::-1] = t
    t += t
    g.open()
    assert t.numpy(timeout=10).tolist() == [4.0, 2.0, 0.0]


def test_a_write_reads_the_value_as_it_was_at_the_call(gate: Callable[[], Gate]) -> None:
    # Found by the random DAG fuzzer: a queued write did not count as a reader
    # of the tensor it writes in, so a later write to that tensor could go first.
    g = gate()
    t = g()  # [0, 1, 2], pending: the write below waits for it
    v = ert.asarray([5.0])
    t[0:1] = v
    v[0] = 99.0
    t[1:2] += v
    g.open()
    assert t.numpy(timeout=10).tolist() == [5.0, 100.0, 2.0]
    assert v.numpy().tolist() == [99.0]


def test_pending_value_and_pending_index(gate: Callable[[], Gate]) -> None:
    g = gate()
    t = ert.zeros(4)
    value = g(np.array([5.0, 6.0]))
    index = ert.asarray([3, 1])
    t[index] = value
    after = t + 0
    g.open()
    assert values(after) == [0.0, 6.0, 0.0, 5.0]


def test_await_sees_the_write(gate: Callable[[], Gate]) -> None:
    import asyncio

    async def main() -> list[float]:
        g = gate()
        t = g()
        t += 1
        g.open()
        return (await t).tolist()

    assert asyncio.run(main()) == [1.0, 2.0, 3.0]


def test_a_failed_version_fails_later_ones_and_their_readers(clean_errors: None) -> None:
    bad = ert.define_op("test_writes_fail", rule=lambda x: (x.shape, x.dtype), cost=lambda *a: 1e12)

    @bad.kernel()
    def _fail(x: Any) -> Any:
        raise RuntimeError("boom")

    t = bad(ert.zeros(3))
    t[0] = 1.0
    reader = t + 1
    for result in (t, reader):
        with pytest.raises(ert.KernelError, match="boom"):
            result.numpy(timeout=10)


def test_a_failed_write_value_fails_the_tensor(clean_errors: None) -> None:
    t = ert.zeros(3)
    t[ert.asarray([0])] = ert.log(ert.asarray([-1.0])) * ert.take(
        ert.ones(1), ert.asarray([5])
    )  # take out of range: the value fails on read
    with pytest.raises(ert.KernelError):
        t.numpy(timeout=10)


def test_out_of_range_index_array_fails_on_read(clean_errors: None) -> None:
    t = ert.zeros(3)
    with ert.config.override(inline_threshold_ns=0):
        t[ert.asarray([7])] = 1.0
    with pytest.raises(ert.KernelError, match="out of bounds"):
        t.numpy(timeout=10)


def test_synchronize_waits_for_queued_writes(gate: Callable[[], Gate]) -> None:
    g = gate()
    t = g()
    t[0] = 5.0
    t[1] = 6.0
    g.open()
    ert.synchronize(timeout=10)
    assert t.is_ready() and values(t) == [5.0, 6.0, 2.0]


def test_sync_mode_writes_at_the_call() -> None:
    with ert.sync_mode():
        t = ert.zeros(3)
        r = t + 1
        t[0] = 7.0
        assert t.is_ready() and r.is_ready()
    assert values(t) == [7.0, 0.0, 0.0] and values(r) == [1.0, 1.0, 1.0]


# -- a random program against numpy's sequential semantics -----------------------------------
@pytest.mark.parametrize("seed", range(12))
def test_random_programs_match_sequential_numpy(seed: int, manual_device: ManualDevice) -> None:
    """Reads, writes and in-place ops on a few tensors, with the device's queued
    work run at random points, give exactly what numpy gives in program order."""
    rng = random.Random(seed)
    n = 5
    model = [np.arange(n, dtype=np.float64) * (k + 1) for k in range(3)]
    tensors = [ert.asarray(m).to(manual_device) for m in model]
    checks: list[tuple[ert.Tensor, np.ndarray]] = []
    with ert.config.override(inline_threshold_ns=0):  # every op queues on the device
        for _ in range(40):
            k, j = rng.randrange(3), rng.randrange(3)
            action = rng.randrange(6)
            if action == 0:
                checks.append((tensors[k] * 2 + tensors[j], model[k] * 2 + model[j]))
            elif action == 1:
                i = rng.randrange(n)
                tensors[k][i] = float(i + 10 * k)
                model[k] = model[k].copy()
                model[k][i] = i + 10 * k
            elif action == 2:
                tensors[k] += tensors[j]
                model[k] = model[k] + model[j]
            elif action == 3:
                idx = sorted(rng.sample(range(n), 2))
                tensors[k][ert.asarray(idx).to(manual_device)] = tensors[j][0:2]
                model[k] = model[k].copy()
                model[k][idx] = model[j][0:2]
            elif action == 4:
                mask = model[j] > model[j].mean()
                tensors[k][tensors[j] > float(model[j].mean())] = -1.0
                model[k] = model[k].copy()
                model[k][mask] = -1.0
            else:
                checks.append((tensors[k][1:4], model[k][1:4].copy()))
            for _ in range(rng.randrange(3)):
                manual_device.run_one()
    manual_device.run_all()
    for k in range(3):
        checks.append((tensors[k], model[k]))
    for tensor, expected in checks:
        np.testing.assert_array_equal(tensor.numpy(timeout=10), expected)


def test_a_0d_result_takes_item_assignment_and_exports_through_dlpack() -> None:
    """Issue 21, item 3: numpy's ops give numpy scalars for 0-d results; a tensor
    holding one must still behave as a 0-d array."""
    s = ert.asarray(1.0) + 1
    s[()] = 5.0
    assert float(s) == 5.0
    assert np.from_dlpack(ert.asarray(1.0) + 1).shape == ()
    assert float(np.from_dlpack(ert.asarray(2.0) * 3)) == 6.0


# -- in-place operators into the tensor's own buffer -----------------------------------------
def _buffer(t: ert.Tensor) -> int:
    t.wait()
    return int(t._value.ctypes.data)


def test_an_in_place_op_nobody_else_sees_writes_into_the_tensors_own_buffer() -> None:
    t = ert.asarray(np.zeros((50, 40)))
    t += 1
    buffer = _buffer(t)
    t += 2.5
    t *= 2
    t -= ert.ones(40)  # a broadcast tensor operand of the same dtype
    assert _buffer(t) == buffer
    assert values(t)[0][0] == 6.0  # read, and the array it gave dropped: t's alone again
    t += 1
    assert _buffer(t) == buffer and values(t)[0][0] == 7.0
    i = ert.arange(5, dtype=ert.int32)
    i += 1
    i_buffer = _buffer(i)
    i += 2
    assert _buffer(i) == i_buffer and values(i) == [3, 4, 5, 6, 7]


@pytest.mark.parametrize("holder", ["view", "reshaped", "handed out", "pending reader"])
def test_whatever_still_sees_the_buffer_keeps_its_values(
    holder: str, gate: Callable[[], Gate]
) -> None:
    t = ert.asarray(np.zeros(6))
    t += 0
    g = gate()
    held: Any = {
        "view": lambda: t[1:3],
        "reshaped": lambda: t.reshape(2, 3),
        "handed out": lambda: t.numpy(),
        "pending reader": lambda: t + g(np.ones(6)),  # reads t once the gate opens
    }[holder]()
    t += 1
    g.open()
    got = held.tolist() if isinstance(held, np.ndarray) else values(held)
    assert np.asarray(got).ravel().tolist() == [1.0 if holder == "pending reader" else 0.0] * (
        len(np.asarray(got).ravel())
    )
    assert values(t) == [1.0] * 6


def test_in_place_ops_that_change_dtype_or_shape_still_refuse() -> None:
    i = ert.asarray(np.zeros(3, np.int8))
    with pytest.raises(ert.DTypeError):
        i += 0.5
    f = ert.asarray(np.zeros(3, np.float32))
    f += ert.asarray(np.ones(3))  # float64 operand: cast back into float32, same kind
    assert f.dtype == np.float32 and values(f) == [1.0] * 3
    with pytest.raises(ert.ShapeError):
        f += ert.ones((2, 3))
    assert values(i) == [0, 0, 0]


# -- writes through basic-index views reach the base (numpy's and array_api_strict's rule) ---
def test_a_write_through_a_view_reaches_its_base() -> None:
    c = ert.zeros((2, 3))
    v = c[0]
    v[1] = 5.0
    assert values(c) == [[0.0, 5.0, 0.0], [0.0, 0.0, 0.0]] and values(v) == [0.0, 5.0, 0.0]
    a = ert.zeros((2, 2, 2))
    a[1][0][1] = 7  # a view of a view of a view
    assert values(a)[1][0][1] == 7.0 and float(ert.sum(a)) == 7.0


def test_adding_to_a_diagonal_through_a_view_as_scikit_learn_does() -> None:
    # sklearn.utils._array_api._add_to_diagonal on covariances[k, :, :]
    covariances = ert.zeros((2, 3, 3))
    for k in range(2):
        covariance = covariances[k, :, :]
        for i in range(3):
            covariance[i, i] += 0.5 * (k + 1)
    expected = np.zeros((2, 3, 3))
    for k in range(2):
        expected[k][np.diag_indices(3)] += 0.5 * (k + 1)
    assert values(covariances) == expected.tolist()


def test_a_view_written_after_its_base_sees_the_bases_writes_first() -> None:
    x = ert.arange(6.0)
    y = x[1:5]
    y += 1  # in place through the view
    x[2] = 100  # the base: y keeps its values until it is written (value semantics)
    assert values(y) == [2.0, 3.0, 4.0, 5.0]
    y[0] = -1  # through the view: numpy's view would show x[2] = 100 by now
    assert values(x) == [0.0, -1.0, 100.0, 4.0, 5.0, 5.0]
    assert values(y) == [-1.0, 100.0, 4.0, 5.0]


def test_writes_through_views_are_ordered_with_pending_work(gate: Callable[[], Gate]) -> None:
    g = gate()
    base = g(np.zeros(4))  # pending until the gate opens
    view = base[1:3]
    view[0] = 9.0
    reader = base * 1  # issued after the write: sees it
    assert not base.is_ready()
    g.open()
    assert values(base) == [0.0, 9.0, 0.0, 0.0] and values(reader) == [0.0, 9.0, 0.0, 0.0]


def test_an_array_index_gives_a_copy_whose_writes_stay_its_own() -> None:
    x = ert.arange(4.0)
    picked = x[ert.asarray([0, 2])]  # numpy: advanced indexing copies
    picked[0] = 50.0
    assert values(x) == [0.0, 1.0, 2.0, 3.0] and values(picked) == [50.0, 2.0]


def test_an_int_for_every_axis_picks_a_copy_as_numpys_scalar() -> None:
    t = ert.zeros((2, 2))
    x = t[0, 0]  # numpy: a scalar, not a view
    x += 1
    assert values(t) == [[0.0, 0.0], [0.0, 0.0]] and float(x) == 1.0
    t[1, 1] += 2  # read, add, write back: numpy's meaning of the statement
    assert values(t) == [[0.0, 0.0], [0.0, 2.0]]
    end = t[1][..., 1]  # a 0-d view, as numpy's a[..., i]
    end[()] = 7
    assert values(t)[1][1] == 7.0
