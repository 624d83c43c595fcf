"""The Tensor's own surface: reading data, conversions, display, metadata, memory.

numpy is the reference for behaviour and for the exception types raised.
"""

from __future__ import annotations

import asyncio
import operator
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import eagerrt as ert


# -- a tensor that stays pending until we say so ----------------------------------------------------
def _gate_op() -> ert.Op:
    name = "test_tensor_surface_gate"
    existing = ert.registered_ops().get(name)
    if existing is not None:
        return existing
    op = ert.define_op(name, rule=lambda x, event: (x.shape, x.dtype))

    @op.kernel()
    def _wait(x: Any, event: threading.Event) -> Any:
        assert event.wait(30), "gate never opened"
        return x

    return op


_GATE = _gate_op()


@pytest.fixture
def gate_event() -> Iterator[threading.Event]:
    """An event; tensors from :func:`pending` stay pending until it is set."""
    event = threading.Event()
    yield event
    event.set()  # never leave a worker blocked


def pending(event: threading.Event, value: Any) -> ert.Tensor:
    with ert.config.override(inline_threshold_ns=0):
        return _GATE(ert.asarray(value), event=event)


# -- reading the data ---------------------------------------------------------------------------------
def test_numpy_returns_the_data_read_only() -> None:
    x = np.arange(6.0).reshape(2, 3)
    t = ert.asarray(x) * 2
    out = t.numpy()
    assert type(out) is np.ndarray
    np.testing.assert_array_equal(out, x * 2)
    assert not out.flags.writeable
    with pytest.raises(ValueError):
        out[0, 0] = 1.0
    np.testing.assert_array_equal(t.numpy(), x * 2)  # nothing changed


@pytest.mark.parametrize(
    "make",
    [
        lambda: ert.asarray(np.arange(6.0)),
        lambda: ert.asarray(np.arange(6.0)) + 1,
        lambda: ert.asarray(np.arange(6.0))[1:4],
        lambda: ert.asarray(np.arange(6.0)).reshape(2, 3),
        lambda: ert.asarray(np.arange(6.0)).reshape(2, 3).T,
        lambda: ert.broadcast_to(ert.asarray(np.arange(3.0)), shape=(2, 3)),
        lambda: ert.asarray(np.arange(6.0)).sum(),
        lambda: ert.exp(ert.asarray(1.0)),
        lambda: ert.split(ert.asarray(np.arange(6.0)), 2)[1],
        lambda: ert.zeros((2, 2)),
        lambda: ert.asarray([[1, 2], [3, 4]]),
    ],
)
def test_every_handed_out_array_is_read_only(make: Any) -> None:
    t = make()
    for out in (t.numpy(), np.asarray(t)):
        assert not out.flags.writeable
        with pytest.raises(ValueError):
            out[...] = 0


def test_pending_numpy_waits() -> None:
    with ert.config.override(inline_threshold_ns=0):
        t = ert.exp(ert.ones((500, 500)))
    np.testing.assert_allclose(t.numpy(timeout=30), np.full((500, 500), np.e))
    assert t.is_ready()


def test_numpy_timeout_on_a_pending_tensor(gate_event: threading.Event) -> None:
    t = pending(gate_event, [1.0, 2.0])
    assert not t.is_ready()
    with pytest.raises(ert.WaitTimeoutError):
        t.numpy(timeout=0.01)
    with pytest.raises(TimeoutError):  # a WaitTimeoutError is a TimeoutError
        t.numpy(timeout=0.01)
    gate_event.set()
    np.testing.assert_array_equal(t.numpy(timeout=30), [1.0, 2.0])


def test_await_gives_the_data(gate_event: threading.Event) -> None:
    t = pending(gate_event, np.arange(4, dtype=np.int32))

    async def main() -> np.ndarray:
        asyncio.get_running_loop().call_later(0.01, gate_event.set)
        return await (t + 1)

    out = asyncio.run(main())
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, [1, 2, 3, 4])
    assert not out.flags.writeable


# -- __array__ and np.asarray ----------------------------------------------------------------------------
def test_np_asarray_shares_the_data() -> None:
    t = ert.asarray(np.arange(4.0)) * 3
    out = np.asarray(t)
    np.testing.assert_array_equal(out, [0.0, 3.0, 6.0, 9.0])
    assert np.shares_memory(out, t.numpy())
    assert not out.flags.writeable


def test_np_asarray_with_copy_false_does_not_copy() -> None:
    t = ert.asarray(np.arange(4.0)) * 3
    out = np.asarray(t, copy=False)
    assert np.shares_memory(out, t.numpy())
    assert t.__array__(copy=False) is t.numpy()
    # The same dtype is fine without a copy; another dtype is not (numpy's rule).
    assert np.asarray(t, dtype=np.float64, copy=False).dtype == np.float64
    with pytest.raises(ValueError):
        np.asarray(t, dtype=np.float32, copy=False)
    with pytest.raises(ValueError):
        t.__array__(np.float32, copy=False)


def test_np_asarray_with_dtype() -> None:
    t = ert.asarray(np.array([1.5, 2.5, -1.0]))
    out = np.asarray(t, dtype=np.float32)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, np.array([1.5, 2.5, -1.0], dtype=np.float32))
    assert t.dtype == np.float64  # the tensor is unchanged


@pytest.mark.parametrize("dtype", [None, np.float64, np.float32, np.int64])
def test_np_asarray_with_copy_true_gives_an_independent_writeable_array(dtype: Any) -> None:
    t = ert.asarray(np.array([1.0, 2.0, 3.0]))
    out = np.asarray(t, dtype=dtype, copy=True)
    assert out.flags.writeable
    assert not np.shares_memory(out, t.numpy())
    out[0] = 100
    np.testing.assert_array_equal(t.numpy(), [1.0, 2.0, 3.0])


def test_np_array_copies_by_default() -> None:
    t = ert.asarray(np.array([1, 2, 3], dtype=np.int8))
    out = np.array(t)
    assert out.dtype == np.int8
    assert out.flags.writeable
    out[0] = 42
    np.testing.assert_array_equal(t.numpy(), [1, 2, 3])


def test_numpy_functions_accept_tensors() -> None:
    t = ert.asarray(np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(np.concatenate([t, t]), np.concatenate([t.numpy()] * 2))
    assert np.stack([t, t]).shape == (2, 2, 3)
    np.testing.assert_array_equal(np.exp(np.asarray(t)), np.exp(t.numpy()))


@pytest.mark.parametrize("fn", [np.sum, np.mean, np.max, np.argmax, np.prod, np.std])
def test_numpy_reductions_accept_tensors(fn: Any) -> None:
    """``np.sum(t)`` calls ``t.sum(axis=None, dtype=None, out=None)``: it must not fail."""
    x = np.arange(6.0).reshape(2, 3)
    t = ert.asarray(x)
    np.testing.assert_allclose(np.asarray(fn(t)), fn(x))
    np.testing.assert_allclose(np.asarray(fn(t, axis=0)), fn(x, axis=0))


# -- the caller's own arrays ---------------------------------------------------------------------------------
def test_asarray_leaves_the_callers_flags_alone() -> None:
    a = np.arange(4.0)
    t = ert.asarray(a)
    _ = (t + 1).numpy()
    assert a.flags.writeable  # still the caller's to write
    assert not t.numpy().flags.writeable
    a[0] = 7.0  # allowed


def test_asarray_shares_memory_like_numpy() -> None:
    """Documented: asarray of an ndarray shares its memory (no copy), as numpy's does.

    Writing to the caller's array is visible through the tensor (and through
    views made from it), so don't write while ops that read it may be pending.
    """
    a = np.arange(4.0)
    t = ert.asarray(a)
    view = t[1:]
    assert np.shares_memory(t.numpy(), a)
    a[1] = 100.0
    assert t.numpy()[1] == 100.0
    assert view.numpy()[0] == 100.0
    # results computed before the write keep their own data
    before = ert.asarray(np.arange(3.0)) + 0
    np.testing.assert_array_equal(before.numpy(), [0.0, 1.0, 2.0])


def test_asarray_copy_true_isolates_the_tensor() -> None:
    a = np.arange(4.0)
    t = ert.asarray(a, copy=True)
    assert not np.shares_memory(t.numpy(), a)
    a[:] = -1
    np.testing.assert_array_equal(t.numpy(), [0.0, 1.0, 2.0, 3.0])
    assert a.flags.writeable


def test_asarray_with_a_new_dtype_copies() -> None:
    a = np.arange(4)
    t = ert.asarray(a, dtype=np.float32)
    assert not np.shares_memory(t.numpy(), a)
    a[0] = 9
    assert t.numpy()[0] == 0.0


def test_asarray_of_a_read_only_array() -> None:
    a = np.arange(3.0)
    a.flags.writeable = False
    t = ert.asarray(a)
    np.testing.assert_array_equal((t * 2).numpy(), [0.0, 2.0, 4.0])
    assert not a.flags.writeable
    assert not t.numpy().flags.writeable


def test_asarray_of_a_tensor_is_the_tensor() -> None:
    t = ert.ones((2,))
    assert ert.asarray(t) is t


def test_ops_do_not_write_to_inputs() -> None:
    a = np.linspace(-2, 2, 7)
    snapshot = a.copy()
    t = ert.asarray(a)
    for result in (
        ert.sigmoid(t),
        ert.gelu(t),
        ert.gelu(t, approximate="tanh"),
        ert.softmax(t),
        ert.log_softmax(t),
        ert.relu(t),
        ert.clip(t, -1.0, 1.0),
        ert.round(t, decimals=1),
        ert.astype(t, "float32"),
        ert.take(t, ert.asarray([1, 0])),
        ert.concat([t, t]),
    ):
        result.numpy()
    np.testing.assert_array_equal(a, snapshot)


# -- Python conversions ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(), (1,), (1, 1)])
def test_scalar_conversions_of_one_element(shape: tuple[int, ...]) -> None:
    t = ert.asarray(np.full(shape, 2.75))
    assert float(t) == 2.75
    assert int(t) == 2
    assert complex(t) == 2.75 + 0j
    assert bool(t) is True
    assert t.item() == 2.75
    assert type(t.item()) is float


def test_scalar_conversions_by_dtype() -> None:
    assert int(ert.asarray(np.int8(-3))) == -3
    assert float(ert.asarray(np.float32(0.5))) == 0.5
    assert bool(ert.asarray(False)) is False
    assert bool(ert.asarray(np.array([0.0]))) is False
    assert complex(ert.asarray(1 + 2j)) == 1 + 2j
    assert int(ert.asarray(-2.7)) == -2  # truncation, as int(np.float64(-2.7))
    assert type(ert.asarray(np.uint8(7)).item()) is int
    assert type(ert.asarray(np.bool_(True)).item()) is bool
    assert type(ert.asarray(1j).item()) is complex
    assert ert.asarray(np.int64(5)).item() == 5


def test_index_conversion() -> None:
    t = ert.asarray(np.int32(2))
    assert operator.index(t) == 2
    assert [10, 20, 30][t] == 30
    assert list(range(ert.asarray(3))) == [0, 1, 2]
    assert hex(ert.asarray(np.uint8(255))) == "0xff"
    with pytest.raises(TypeError):
        operator.index(ert.asarray(2.0))
    with pytest.raises(TypeError):
        [1, 2][ert.asarray(1.0)]


def test_index_conversion_of_a_bool_tensor_is_a_type_error() -> None:
    """numpy: ``operator.index(np.array(True))`` raises TypeError (bools are not indexes)."""
    with pytest.raises(TypeError):
        operator.index(np.array(True))
    with pytest.raises(TypeError):
        operator.index(ert.asarray(True))


@pytest.mark.parametrize("convert", [float, int, complex], ids=lambda f: f.__name__)
@pytest.mark.parametrize("shape", [(2,), (2, 3), (0,)])
def test_scalar_conversion_of_many_elements_is_a_type_error(convert: Any, shape: Any) -> None:
    """numpy raises TypeError for ``float(array_of_two)``; code catching it must keep working."""
    with pytest.raises(TypeError):
        convert(np.ones(shape))
    with pytest.raises(TypeError):
        convert(ert.ones(shape))


@pytest.mark.parametrize("shape", [(2,), (0,)])
def test_index_conversion_of_many_elements_is_a_type_error(shape: Any) -> None:
    with pytest.raises(TypeError):
        operator.index(np.ones(shape, dtype=int))
    with pytest.raises(TypeError):
        operator.index(ert.ones(shape, dtype=int))


@pytest.mark.parametrize("shape", [(2,), (2, 3), (0,)])
def test_bool_of_many_elements_is_a_value_error(shape: Any) -> None:
    with pytest.raises(ValueError):
        bool(np.ones(shape))
    with pytest.raises(ValueError):
        bool(ert.ones(shape))


@pytest.mark.parametrize("shape", [(2,), (0,)])
def test_item_of_many_elements_is_a_value_error(shape: Any) -> None:
    with pytest.raises(ValueError):
        np.ones(shape).item()
    with pytest.raises(ValueError):
        ert.ones(shape).item()


def test_if_on_a_tensor() -> None:
    assert ert.asarray(1.0)
    assert not ert.asarray(0)
    with pytest.raises(ValueError):
        if ert.ones(3):
            pass


def test_conversions_wait_for_pending_data(gate_event: threading.Event) -> None:
    t = pending(gate_event, 4.5)
    threading.Timer(0.02, gate_event.set).start()
    assert float(t) == 4.5
    assert t.is_ready()


# -- item / tolist / len / iteration ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "value",
    [
        3.5,
        np.int8(-4),
        np.arange(6).reshape(2, 3),
        np.array([[True, False]]),
        np.zeros((2, 0)),
        np.array([1 + 2j, 3j]),
        np.arange(24, dtype=np.float32).reshape(2, 3, 4),
    ],
)
def test_tolist_matches_numpy(value: Any) -> None:
    expected = np.asarray(value).tolist()
    got = ert.asarray(value).tolist()
    assert got == expected
    assert type(got) is type(expected)


def test_item_of_a_single_element() -> None:
    assert ert.asarray([[7]]).item() == 7
    assert ert.asarray(np.float32(1.25)).item() == 1.25


def test_len() -> None:
    assert len(ert.zeros((4, 2))) == 4
    assert len(ert.zeros((0, 3))) == 0
    assert len(ert.zeros(5)) == 5
    with pytest.raises(TypeError):
        len(np.zeros(()))
    with pytest.raises(TypeError):
        len(ert.zeros(()))


def test_iteration_yields_tensors_of_the_rows() -> None:
    x = np.arange(6).reshape(3, 2)
    rows = list(ert.asarray(x))
    assert len(rows) == 3
    for row, expected in zip(rows, x, strict=True):
        assert isinstance(row, ert.Tensor)
        assert (row.shape, row.dtype) == ((2,), x.dtype)
        np.testing.assert_array_equal(row.numpy(), expected)
    assert [r.item() for r in ert.asarray([1.5, 2.5])] == [1.5, 2.5]
    assert list(ert.zeros((0, 3))) == []
    a, b = ert.asarray([1, 2])  # unpacking
    assert (int(a), int(b)) == (1, 2)


def test_iteration_over_a_0d_tensor_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        iter(np.array(1.0))
    with pytest.raises(TypeError):
        list(ert.asarray(1.0))


# -- display -----------------------------------------------------------------------------------------------------
def test_repr_of_ready_tensors() -> None:
    assert repr(ert.asarray([1.0, 2.0])) == "Tensor([1., 2.], shape=(2,), dtype=float64)"
    assert repr(ert.asarray(np.int8(3))) == "Tensor(3, shape=(), dtype=int8)"
    assert repr(ert.zeros((0, 2), dtype="float32")) == "Tensor([], shape=(0, 2), dtype=float32)"
    r = repr(ert.asarray([[1, 2], [3, 4]]))
    assert r.startswith("Tensor([[1, 2],")
    assert r.endswith("shape=(2, 2), dtype=int64)")
    assert "\n        [3, 4]]" in r  # continuation lines line up under "Tensor("
    assert "True" in repr(ert.asarray([True, False]))


def test_repr_of_a_pending_tensor(gate_event: threading.Event) -> None:
    t = pending(gate_event, np.zeros((2, 3)))
    assert repr(t) == "Tensor(<pending>, shape=(2, 3), dtype=float64)"
    assert str(t) == repr(t)
    u = pending(gate_event, np.zeros(4, dtype=np.int8))
    assert repr(u) == "Tensor(<pending>, shape=(4,), dtype=int8)"
    gate_event.set()
    t.numpy(timeout=30)
    u.numpy(timeout=30)
    assert repr(t).startswith("Tensor([[0., 0., 0.],")


def test_repr_of_a_pending_big_op() -> None:
    """A big op forced onto a worker is usually still running when shown."""
    with ert.config.override(inline_threshold_ns=0):
        t = ert.exp(ert.ones((1500, 1500)))
        text = repr(t)
    assert t.numpy(timeout=60).shape == (1500, 1500)
    assert text in ("Tensor(<pending>, shape=(1500, 1500), dtype=float64)", repr(t))


def test_repr_of_a_failed_tensor() -> None:
    bad = ert.take(ert.asarray([1.0, 2.0]), ert.asarray([7]))
    assert repr(bad) == "Tensor(<error: take failed: IndexError>, shape=(1,), dtype=float64)"
    with pytest.raises(ert.KernelError):
        bad.numpy()  # read it, so it is not left unobserved


def test_str_and_format() -> None:
    x = np.array([[1.5, 2.0], [3.0, 4.25]])
    t = ert.asarray(x)
    assert str(t) == str(x)
    assert str(ert.asarray(2.5)) == str(np.asarray(2.5))
    assert f"{t}" == str(x)
    assert f"{ert.asarray(3.14159):.2f}" == "3.14"
    assert f"{ert.asarray([2.5]):.1f}" == "2.5"
    assert format(ert.asarray(np.int8(7)), "03d") == "007"


# -- metadata ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("shape", "dtype"),
    [
        ((), "float64"),
        ((3,), "int8"),
        ((2, 3, 4), "float32"),
        ((0, 5), "complex128"),
        ((7,), "bool"),
    ],
)
def test_ndim_size_nbytes(shape: tuple[int, ...], dtype: str) -> None:
    t = ert.zeros(shape, dtype=dtype)
    a = np.zeros(shape, dtype=dtype)
    assert (t.ndim, t.size, t.nbytes) == (a.ndim, a.size, a.nbytes)
    assert t.shape == a.shape
    assert isinstance(t.shape, tuple)
    assert t.dtype == a.dtype
    assert isinstance(t.dtype, np.dtype)
    assert t.device.name == "cpu"


def test_metadata_is_known_while_pending(gate_event: threading.Event) -> None:
    t = pending(gate_event, np.ones((2, 3), dtype=np.float32))
    results = {
        "sum": t.sum(axis=1, keepdims=True),
        "matmul": t @ ert.ones((3, 5), dtype="float32"),
        "astype": ert.astype(t, "int8"),
        "getitem": t[:, None, 0],
        "T": t.T,
        "mul": t * 2,
        "div": t / 2,
        "eq": t == 1,
    }
    meta = {k: (v.shape, v.dtype) for k, v in results.items()}
    assert not any(v.is_ready() for v in results.values())
    f32, i8 = np.dtype("float32"), np.dtype("int8")
    assert meta == {
        "sum": ((2, 1), f32),
        "matmul": ((2, 5), f32),
        "astype": ((2, 3), i8),
        "getitem": ((2, 1), f32),
        "T": ((3, 2), f32),
        "mul": ((2, 3), f32),
        "div": ((2, 3), f32),
        "eq": ((2, 3), np.dtype(bool)),
    }
    gate_event.set()
    for name, v in results.items():
        data = v.numpy(timeout=30)
        assert (data.shape, data.dtype) == meta[name], name


def test_op_names() -> None:
    x = ert.asarray([1.0, 2.0])
    assert x.op == "asarray"
    assert (x + x).op == "add"
    assert (x @ x).op == "matmul"
    assert x.sum().op == "sum"
    assert x[0].op == "getitem"


def test_tensors_hash_by_identity() -> None:
    a, b = ert.asarray([1.0]), ert.asarray([1.0])
    assert hash(a) == hash(a) and hash(a) != hash(b)
    table = {a: "a", b: "b"}  # equal values, two keys: == is elementwise, never consulted
    assert table[a] == "a" and table[b] == "b"
    assert a in {a} and b not in {a}


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_asyncio_combinators_take_tensors(loop: str) -> None:
    async def main() -> None:
        a, b = ert.asarray([1.0, 2.0]) * 2, ert.asarray([3.0]) + 1
        first, second, again = await asyncio.gather(a, b, a)
        np.testing.assert_array_equal(first, [2.0, 4.0])
        np.testing.assert_array_equal(second, [4.0])
        assert again is first
        done, pending = await asyncio.wait([asyncio.ensure_future(t) for t in (a, b)])
        assert len(done) == 2 and not pending
        got = [await f for f in asyncio.as_completed([a, b])]
        assert sorted(len(g) for g in got) == [1, 2]

    if loop == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(main())
    else:
        asyncio.run(main())


def test_tensors_are_made_by_ops_only() -> None:
    with pytest.raises(TypeError):
        ert.Tensor()


def test_comparisons_give_tensors_not_bools() -> None:
    a, b = ert.asarray([1, 2]), ert.asarray([1, 3])
    eq = a == b
    assert isinstance(eq, ert.Tensor)
    np.testing.assert_array_equal(eq.numpy(), [True, False])
    assert isinstance(a != b, ert.Tensor)
    assert isinstance(np.array([1, 2]) == a, ert.Tensor)
    assert isinstance(np.array([1, 2]) < a, ert.Tensor)
    with pytest.raises(ValueError):
        bool(a == b)  # ambiguous, as numpy


def test_ndarray_on_the_left_gives_a_tensor() -> None:
    x = np.array([[1.0, 2.0], [3.0, 4.0]])
    t = ert.asarray(x)
    for got, want in [
        (x + t, x + x),
        (x - t, x - x),
        (x * t, x * x),
        (x / t, x / x),
        (x // t, x // x),
        (x % t, x % x),
        (x**t, x**x),
        (x @ t, x @ x),
        (x > t, x > x),
    ]:
        assert isinstance(got, ert.Tensor)
        assert (got.shape, got.dtype) == (want.shape, want.dtype)
        np.testing.assert_allclose(got.numpy(), want)


def test_numpy_scalar_on_the_left_gives_a_tensor() -> None:
    t = ert.asarray(np.array([1, 2], dtype=np.int8))
    for got, want in [
        (np.float32(2) * t, np.float32(2) * t.numpy()),
        (np.int8(3) - t, np.int8(3) - t.numpy()),
        (np.float64(1.5) + t, np.float64(1.5) + t.numpy()),
    ]:
        assert isinstance(got, ert.Tensor)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("copy", ()),
        ("ravel", ()),
        ("flatten", ()),
        ("squeeze", ()),
        ("clip", (0.0, 2.0)),
        ("round", (1,)),
        ("cumsum", ()),
        ("any", ()),
        ("all", ()),
        ("dot", (np.arange(4.0).reshape(2, 2),)),
        ("cumprod", ()),
        ("cumprod", (2,)),
        ("diagonal", ()),
        ("diagonal", (0, 1, 2)),
        ("trace", ()),
        ("trace", (1, 1, 2)),
        ("swapaxes", (0, 2)),
        ("repeat", (2,)),
        ("repeat", (2, 1)),
        ("take", ([0, 3],)),
        ("take", ([1], 2)),
        ("conj", ()),
        ("conjugate", ()),
    ],
)
def test_the_ndarray_methods_numpy_users_reach_for(name: str, args: tuple[Any, ...]) -> None:
    """Issue 21, item 8: the same answers as the ndarray's methods."""
    a = np.array([[[1.55, -2.0], [3.0, 0.25]]])
    got = getattr(ert.asarray(a), name)(*args)
    assert type(got) is ert.Tensor
    np.testing.assert_array_equal(got.numpy(), getattr(a, name)(*args))


def test_itemsize_strides_and_format() -> None:
    t = ert.asarray(np.zeros((2, 3), "float32"))
    assert t.itemsize == 4 and t.strides == (12, 4)
    assert format(ert.asarray(1.5), ".2f") == "1.50"
    x = np.arange(24.0).reshape(2, 3, 4)
    np.testing.assert_array_equal(ert.asarray(x).dot(np.ones(4)).numpy(), x.dot(np.ones(4)))


def test_more_ndarray_methods_and_attributes() -> None:
    """What SciPy's signal functions and numpy habits reach for: real, imag,
    argsort, nonzero, searchsorted, fill, tobytes."""
    c = np.array([1 + 2j, 3 - 1j, -2j])
    t = ert.asarray(c)
    np.testing.assert_array_equal(t.real.numpy(), c.real)
    np.testing.assert_array_equal(t.imag.numpy(), c.imag)
    r = np.array([3.0, 1.0, 0.0, 1.0])
    np.testing.assert_array_equal(ert.asarray(r).real.numpy(), r)
    np.testing.assert_array_equal(ert.asarray(r).imag.numpy(), np.zeros(4))
    np.testing.assert_array_equal(ert.asarray(r).argsort().numpy(), r.argsort(kind="stable"))
    (nz,) = ert.asarray(r).nonzero()
    np.testing.assert_array_equal(nz.numpy(), r.nonzero()[0])
    s = np.array([1.0, 2.0, 3.0])
    np.testing.assert_array_equal(
        ert.asarray(s).searchsorted(ert.asarray([2.5, 0.0])).numpy(), s.searchsorted([2.5, 0.0])
    )
    filled = ert.zeros((2, 2))
    filled.fill(3.0)
    np.testing.assert_array_equal(filled.numpy(), np.full((2, 2), 3.0))
    assert ert.asarray(s).tobytes() == s.tobytes()


def test_linspace_takes_0d_tensor_bounds() -> None:
    """SciPy's freqs passes 0-d arrays as linspace's bounds."""
    got = ert.linspace(ert.asarray(-2.0), ert.asarray(1.0), 5)
    np.testing.assert_array_equal(got.numpy(), np.linspace(-2.0, 1.0, 5))
    assert ert.linspace(ert.asarray(np.float32(0)), 1.0, 3).dtype == np.float64
    with pytest.raises(ert.ShapeError, match="0-d"):
        ert.linspace(ert.ones(2), 1.0, 3)
