"""The Array API 2024.12 creation, manipulation, statistical, utility, searching,
sorting and set functions: what the op records (values against numpy, in every
dtype and scheduling mode) don't cover.

* the standard's signatures: positional-only parameters refuse keywords,
  keyword-only ones refuse positions, the standard's own call forms work;
* default dtypes, ``device=`` and ``asarray``'s copy semantics;
* the standard's semantics where numpy differs or says nothing: NaNs distinct in
  ``unique_*``, stable descending sorts, ``correction=``, ``include_initial``;
* bad axes, shapes and dtypes fail at the call with eagerrt's errors;
* ops whose result shape is known at the call stay asynchronous on a pending
  input, and the data-dependent ones (``nonzero``, ``unique_*``, ``repeat`` by a
  tensor) wait for it and return ready tensors.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import array_api_strict as xps
import numpy as np
import pytest

import eagerrt as ert

NAN = float("nan")


def _t(data: Any, dtype: Any = None) -> ert.Tensor:
    return ert.asarray(np.asarray(data, dtype=dtype))


def _open_soon(gate: Any, delay: float = 0.05) -> threading.Timer:
    """Open ``gate`` from another thread while the test's thread waits."""
    timer = threading.Timer(delay, gate.open)
    timer.start()
    return timer


# -- signatures ----------------------------------------------------------------------
_X = np.arange(6.0).reshape(2, 3)

#: Calls that pass a positional-only parameter by keyword, or a keyword-only one
#: by position: the standard's signatures refuse both.
_REFUSED: dict[str, Callable[[ert.Tensor], Any]] = {
    "asarray(obj=)": lambda t: ert.asarray(obj=[1]),
    "asarray(_, dtype)": lambda t: ert.asarray([1], "int8"),
    "zeros(_, dtype)": lambda t: ert.zeros((2,), "int8"),
    "ones(_, dtype)": lambda t: ert.ones((2,), "int8"),
    "empty(_, dtype)": lambda t: ert.empty((2,), "int8"),
    "full(_, _, dtype)": lambda t: ert.full((2,), 1, "int8"),
    "eye(n_rows=)": lambda t: ert.eye(n_rows=2),
    "eye(_, _, k)": lambda t: ert.eye(2, 2, 1),
    "arange(start=)": lambda t: ert.arange(start=3),
    "linspace(start=)": lambda t: ert.linspace(start=0, stop=1, num=3),
    "zeros_like(x=)": lambda t: ert.zeros_like(x=t),
    "ones_like(_, dtype)": lambda t: ert.ones_like(t, "int8"),
    "full_like(x=)": lambda t: ert.full_like(x=t, fill_value=1),
    "tril(_, k)": lambda t: ert.tril(t, 1),
    "triu(x=)": lambda t: ert.triu(x=t),
    "broadcast_to(x=)": lambda t: ert.broadcast_to(x=t, shape=(2, 3)),
    "concat(arrays=)": lambda t: ert.concat(arrays=[t, t]),
    "concat(_, axis)": lambda t: ert.concat([t, t], 1),
    "stack(_, axis)": lambda t: ert.stack([t, t], 1),
    "expand_dims(x=)": lambda t: ert.expand_dims(x=t, axis=0),
    "flip(_, axis)": lambda t: ert.flip(t, 0),
    "moveaxis(source=)": lambda t: ert.moveaxis(t, source=0, destination=1),
    "permute_dims(x=)": lambda t: ert.permute_dims(x=t, axes=(1, 0)),
    "repeat(repeats=)": lambda t: ert.repeat(t, repeats=2),
    "repeat(_, _, axis)": lambda t: ert.repeat(t, 2, 0),
    "reshape(_, _, copy)": lambda t: ert.reshape(t, (6,), True),
    "roll(_, _, axis)": lambda t: ert.roll(t, 1, 0),
    "squeeze(x=)": lambda t: ert.squeeze(x=t, axis=0),
    "tile(repetitions=)": lambda t: ert.tile(t, repetitions=(2,)),
    "unstack(_, axis)": lambda t: ert.unstack(t, 0),
    "cumulative_sum(_, axis)": lambda t: ert.cumulative_sum(t, 0),
    "cumulative_prod(x=)": lambda t: ert.cumulative_prod(x=t, axis=0),
    "sum(x=)": lambda t: ert.sum(x=t),
    "sum(_, axis)": lambda t: ert.sum(t, 0),
    "prod(_, axis)": lambda t: ert.prod(t, 0),
    "mean(_, axis)": lambda t: ert.mean(t, 0),
    "max(_, axis)": lambda t: ert.max(t, 0),
    "min(x=)": lambda t: ert.min(x=t),
    "var(_, axis)": lambda t: ert.var(t, 0),
    "std(_, axis)": lambda t: ert.std(t, 0),
    "all(_, axis)": lambda t: ert.all(t, 0),
    "any(x=)": lambda t: ert.any(x=t),
    "diff(_, axis)": lambda t: ert.diff(t, 0),
    "argmax(_, axis)": lambda t: ert.argmax(t, 0),
    "argmin(x=)": lambda t: ert.argmin(x=t),
    "count_nonzero(_, axis)": lambda t: ert.count_nonzero(t, 0),
    "nonzero(x=)": lambda t: ert.nonzero(x=t),
    "searchsorted(x2=)": lambda t: ert.searchsorted(t[0], x2=t),
    "searchsorted(_, _, side)": lambda t: ert.searchsorted(t[0], t, "left"),
    "sort(_, axis)": lambda t: ert.sort(t, 0),
    "argsort(x=)": lambda t: ert.argsort(x=t),
    "unique_values(x=)": lambda t: ert.unique_values(x=t),
    "unique_all(x=)": lambda t: ert.unique_all(x=t),
}


@pytest.mark.parametrize("call", list(_REFUSED.values()), ids=list(_REFUSED))
def test_signature_refuses_what_the_standard_refuses(call: Callable[[ert.Tensor], Any]) -> None:
    with pytest.raises(TypeError):
        call(ert.asarray(_X))


_STANDARD_FORMS: dict[str, Callable[[ert.Tensor], Any]] = {
    "linspace(num=)": lambda t: ert.linspace(0, 1, num=3),
    "arange(_, stop, step)": lambda t: ert.arange(0, 6, 2),
    "full(shape=, fill_value=)": lambda t: ert.full(shape=(2,), fill_value=3),
    "full_like(_, fill_value=)": lambda t: ert.full_like(t, fill_value=2),
    "broadcast_to(_, shape=)": lambda t: ert.broadcast_to(t, shape=(2, 2, 3)),
    "expand_dims(_, axis=)": lambda t: ert.expand_dims(t, axis=-1),
    "expand_dims(_, int)": lambda t: ert.expand_dims(t, 0),
    "permute_dims(_, axes=)": lambda t: ert.permute_dims(t, axes=(1, 0)),
    "reshape(_, shape=, copy=)": lambda t: ert.reshape(t, shape=(3, 2), copy=True),
    "roll(_, shift=)": lambda t: ert.roll(t, shift=1),
    "squeeze(_, axis=)": lambda t: ert.squeeze(ert.expand_dims(t, axis=0), axis=0),
    "var(correction=)": lambda t: ert.var(t, axis=0, correction=1, keepdims=True),
    "moveaxis(_, _, _)": lambda t: ert.moveaxis(t, 0, 1),
    "tile(_, _)": lambda t: ert.tile(t, (1, 2)),
}


@pytest.mark.parametrize("call", list(_STANDARD_FORMS.values()), ids=list(_STANDARD_FORMS))
def test_the_standards_call_forms_work(call: Callable[[ert.Tensor], Any]) -> None:
    out = call(ert.asarray(_X))
    assert isinstance(out, ert.Tensor)
    assert out.numpy().shape == out.shape


@pytest.mark.parametrize(
    "name",
    ["reshape", "squeeze", "unstack", "sort", "argsort", "cumulative_sum", "diff", "var", "tile"],
)
def test_parameter_kinds_match_array_api_strict(name: str) -> None:
    import inspect

    ours = list(inspect.signature(getattr(ert, name)).parameters.values())
    ref = list(inspect.signature(getattr(xps, name)).parameters.values())
    for mine, theirs in zip(ours, ref, strict=False):
        assert mine.kind == theirs.kind, (name, mine, theirs)
        if theirs.kind is not inspect.Parameter.POSITIONAL_ONLY:
            assert mine.name == theirs.name, (name, mine, theirs)


# -- creation ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("make", "dtype"),
    [
        (lambda: ert.zeros(2), "float64"),
        (lambda: ert.ones((2,)), "float64"),
        (lambda: ert.empty(()), "float64"),
        (lambda: ert.eye(2), "float64"),
        (lambda: ert.arange(3), "int64"),
        (lambda: ert.arange(0.5, 3), "float64"),
        (lambda: ert.arange(0, 3, 0.5), "float64"),
        (lambda: ert.full((2,), True), "bool"),
        (lambda: ert.full((2,), 3), "int64"),
        (lambda: ert.full((2,), 3.0), "float64"),
        (lambda: ert.full((2,), 1 + 2j), "complex128"),
        (lambda: ert.linspace(0, 1, 3), "float64"),
        (lambda: ert.linspace(0, 1j, 3), "complex128"),
        (lambda: ert.asarray(2j), "complex128"),
        (lambda: ert.asarray([1, 2.5]), "float64"),
        (lambda: ert.asarray([True]), "bool"),
        (lambda: ert.asarray(3), "int64"),
        (lambda: ert.full_like(_t([1, 2], "int8"), 5), "int8"),
        (lambda: ert.zeros_like(_t([1.0], "float32"), dtype="uint16"), "uint16"),
    ],
)
def test_default_dtypes(make: Callable[[], ert.Tensor], dtype: str) -> None:
    t = make()
    assert t.dtype == np.dtype(dtype)
    assert t.numpy().dtype == np.dtype(dtype)


@pytest.mark.parametrize("device", ["cpu", ert.get_device("cpu")])
def test_creation_takes_device(device: Any) -> None:
    like = ert.ones((2,))
    for t in (
        ert.asarray([1, 2], device=device),
        ert.zeros(2, device=device),
        ert.ones(2, device=device),
        ert.empty(2, device=device),
        ert.full(2, 7, device=device),
        ert.arange(3, device=device),
        ert.linspace(0, 1, 3, device=device),
        ert.eye(2, device=device),
        ert.zeros_like(like, device=device),
        ert.ones_like(like, device=device),
        ert.empty_like(like, device=device),
        ert.full_like(like, 3, device=device),
    ):
        assert t.device is ert.get_device("cpu")
    with pytest.raises(ert.DeviceError):
        ert.zeros(2, device="no-such-device")


def test_creation_on_another_device(manual_device: Any) -> None:
    made = ert.full((2,), 3.0, device=manual_device.name)
    assert made.device is manual_device
    moved = ert.asarray(ert.arange(3), device=manual_device)
    assert moved.device is manual_device
    like = ert.zeros_like(ert.ones(2), device=manual_device)
    assert like.device is manual_device
    with pytest.raises(ert.ArgumentError):
        ert.asarray(ert.arange(3), device=manual_device, copy=False)
    manual_device.run_all()
    assert moved.numpy().tolist() == [0, 1, 2]
    assert made.numpy().tolist() == [3.0, 3.0]


def test_asarray_copy_semantics() -> None:
    a = np.arange(4.0)
    assert np.shares_memory(ert.asarray(a).numpy(), a)
    assert np.shares_memory(ert.asarray(a, copy=False).numpy(), a)
    assert not np.shares_memory(ert.asarray(a, copy=True).numpy(), a)
    with pytest.raises(ert.ArgumentError):
        ert.asarray([1.0, 2.0], copy=False)  # a list always needs a copy
    with pytest.raises(ert.ArgumentError):
        ert.asarray(a, dtype="float32", copy=False)
    t = ert.asarray(a)
    assert ert.asarray(t) is t
    assert ert.asarray(t, copy=False) is t
    assert ert.asarray(t, dtype="float64", copy=False) is t
    copied = ert.asarray(t, copy=True)
    assert copied is not t
    assert not np.shares_memory(copied.numpy(), t.numpy())
    np.testing.assert_array_equal(copied.numpy(), a)
    with pytest.raises(ert.ArgumentError):
        ert.asarray(t, dtype="int8", copy=False)
    cast = ert.asarray(t, dtype="int8")
    assert cast.dtype == np.int8
    np.testing.assert_array_equal(cast.numpy(), a.astype(np.int8))


def test_eye_tril_triu_meshgrid() -> None:
    np.testing.assert_array_equal(ert.eye(3, 2, k=-1).numpy(), np.eye(3, 2, k=-1))
    np.testing.assert_array_equal(ert.eye(2, k=3).numpy(), np.eye(2, k=3))
    x = np.arange(24).reshape(2, 3, 4)
    np.testing.assert_array_equal(ert.tril(ert.asarray(x), k=-1).numpy(), np.tril(x, -1))
    np.testing.assert_array_equal(ert.triu(ert.asarray(x), k=2).numpy(), np.triu(x, 2))
    grids = ert.meshgrid(ert.arange(3), ert.arange(2), indexing="ij")
    assert isinstance(grids, list)
    assert [g.shape for g in grids] == [(3, 2), (3, 2)]
    assert ert.meshgrid() == []
    strict = xps.meshgrid(xps.arange(3), xps.arange(2))
    for ours, theirs in zip(ert.meshgrid(ert.arange(3), ert.arange(2)), strict, strict=True):
        np.testing.assert_array_equal(ours.numpy(), np.asarray(theirs))


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda: ert.tril(ert.ones(3)), ert.ShapeError),
        (lambda: ert.triu(ert.ones((2, 2)), k=1.5), ert.DTypeError),
        (lambda: ert.eye(2, k=0.5), ert.DTypeError),
        (lambda: ert.eye(-1), ert.ShapeError),
        (lambda: ert.zeros((2, -1)), ert.ShapeError),
        (lambda: ert.zeros(2.5), ert.DTypeError),
        (lambda: ert.full((2,), "a"), ert.DTypeError),
        (lambda: ert.full((2,), ert.ones(())), ert.DTypeError),
        (lambda: ert.linspace(0, 1, -1), ert.ShapeError),
        (lambda: ert.linspace(0, 1, 2.5), ert.DTypeError),
        (lambda: ert.arange(0, 1, 0), ert.ShapeError),
        (lambda: ert.arange(1j), ert.DTypeError),
        (lambda: ert.meshgrid(ert.ones(2), indexing="xx"), ert.ArgumentError),
    ],
)
def test_creation_errors_at_the_call(make: Callable[[], Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        make()


# -- manipulation -------------------------------------------------------------------------
def test_manipulation_results() -> None:
    x = np.arange(24).reshape(2, 3, 4)
    t = ert.asarray(x)
    parts = ert.unstack(t, axis=-1)
    assert isinstance(parts, tuple) and len(parts) == 4
    for got, want in zip(parts, np.unstack(x, axis=-1), strict=True):
        np.testing.assert_array_equal(got.numpy(), want)
    assert ert.unstack(ert.zeros((0, 2))) == ()
    pair = ert.broadcast_arrays(ert.ones((2, 1)), ert.zeros(3))
    assert isinstance(pair, list) and [p.shape for p in pair] == [(2, 3), (2, 3)]
    np.testing.assert_array_equal(
        ert.expand_dims(t, axis=(0, -1)).numpy(), np.expand_dims(x, (0, -1))
    )
    np.testing.assert_array_equal(ert.flip(t).numpy(), np.flip(x))
    np.testing.assert_array_equal(
        ert.roll(t, (1, -1), axis=(0, 2)).numpy(), np.roll(x, (1, -1), (0, 2))
    )
    np.testing.assert_array_equal(ert.tile(t, (2, 1, 1, 1)).numpy(), np.tile(x, (2, 1, 1, 1)))
    counts = np.array([1, 0, 2])
    np.testing.assert_array_equal(
        ert.repeat(t, ert.asarray(counts), axis=1).numpy(), np.repeat(x, counts, axis=1)
    )
    np.testing.assert_array_equal(
        ert.repeat(t, ert.asarray([2], dtype="uint8")).numpy(), np.repeat(x, 2)
    )


def test_reshape_copy() -> None:
    base = ert.arange(6)
    assert np.shares_memory(ert.reshape(base, (2, 3)).numpy(), base.numpy())
    assert np.shares_memory(ert.reshape(base, (2, 3), copy=False).numpy(), base.numpy())
    copied = ert.reshape(base, (3, 2), copy=True)
    assert not np.shares_memory(copied.numpy(), base.numpy())
    np.testing.assert_array_equal(copied.numpy(), np.arange(6).reshape(3, 2))
    transposed = ert.permute_dims(ert.reshape(base, (2, 3)), (1, 0))
    with pytest.raises(ert.ArgumentError, match="copy"):
        ert.reshape(transposed, (6,), copy=False)  # not a view of a transposed array
    np.testing.assert_array_equal(
        ert.reshape(transposed, (6,)).numpy(), np.arange(6).reshape(2, 3).T.reshape(6)
    )


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda t: ert.flip(t, axis=3), ert.OutOfBoundsError),
        (lambda t: ert.flip(t, axis=(0, 0)), ert.ShapeError),
        (lambda t: ert.flip(t, axis=0.5), ert.DTypeError),
        (lambda t: ert.moveaxis(t, (0, 1), (1, 1)), ert.ShapeError),
        (lambda t: ert.moveaxis(t, (0, 1), 0), ert.ShapeError),
        (lambda t: ert.moveaxis(t, 5, 0), ert.OutOfBoundsError),
        (lambda t: ert.permute_dims(t, (0, 0, 1)), ert.ShapeError),
        (lambda t: ert.expand_dims(t, axis=4), ert.OutOfBoundsError),
        (lambda t: ert.squeeze(t, axis=0), ert.ShapeError),
        (lambda t: ert.broadcast_to(t, (3, 4)), ert.ShapeError),
        (lambda t: ert.broadcast_arrays(t, ert.ones(5)), ert.ShapeError),
        (lambda t: ert.reshape(t, (5,)), ert.ShapeError),
        (lambda t: ert.roll(t, (1, 2)), ert.ShapeError),
        (lambda t: ert.roll(t, (1, 2, 3), axis=(0, 1)), ert.ShapeError),
        (lambda t: ert.roll(t, 1.5), ert.DTypeError),
        (lambda t: ert.tile(t, (-1,)), ert.ShapeError),
        (lambda t: ert.tile(t, (1.5,)), ert.DTypeError),
        (lambda t: ert.repeat(t, -1), ert.ShapeError),
        (lambda t: ert.repeat(t, 1.5), ert.DTypeError),
        (lambda t: ert.repeat(t, ert.asarray([1.0, 2.0, 3.0]), axis=1), ert.DTypeError),
        (lambda t: ert.repeat(t, ert.asarray([1, 2]), axis=1), ert.ShapeError),
        (lambda t: ert.repeat(t, ert.asarray([1, -1, 1]), axis=1), ert.ShapeError),
        (lambda t: ert.repeat(t, 2, axis=2), ert.OutOfBoundsError),
        (lambda t: ert.unstack(t, axis=2), ert.OutOfBoundsError),
        (lambda t: ert.concat([t, ert.ones(3)]), ert.ShapeError),
        (lambda t: ert.stack([t, ert.ones(3)]), ert.ShapeError),
    ],
)
def test_manipulation_errors_at_the_call(
    make: Callable[[ert.Tensor], Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        make(ert.ones((2, 3)))


# -- statistical and utility --------------------------------------------------------------
def test_sum_and_prod_accumulate_in_the_default_int() -> None:
    assert ert.sum(_t([100, 100], "int8")).dtype == np.int64
    assert ert.sum(_t([100, 100], "int8")).item() == 200
    assert ert.prod(_t([200, 200], "uint8")).dtype == np.uint64
    assert ert.sum(_t([True, True])).dtype == np.int64
    assert ert.sum(_t([1.5], "float32")).dtype == np.float32
    assert ert.sum(_t([1, 2], "int8"), dtype="int8").dtype == np.int8
    assert ert.cumulative_sum(_t([100, 100], "int8")).numpy().tolist() == [100, 200]


def test_var_and_std_correction() -> None:
    x = np.array([[1.0, 2.0, 4.0], [3.0, 5.0, 9.0]])
    t = ert.asarray(x)
    for fn, ref in ((ert.var, np.var), (ert.std, np.std)):
        np.testing.assert_allclose(fn(t, correction=1).numpy(), ref(x, ddof=1))
        np.testing.assert_allclose(fn(t, axis=1, correction=0.5).numpy(), ref(x, 1, ddof=0.5))
        np.testing.assert_allclose(fn(t, axis=0, ddof=1).numpy(), ref(x, 0, ddof=1))
        with pytest.raises(ert.ArgumentError):
            fn(t, correction=1, ddof=1)
        with pytest.raises(ert.ArgumentError):
            fn(t, correction=-1)
        with pytest.raises(ert.DTypeError):
            fn(t, correction="1")


def test_cumulative_include_initial_and_axes() -> None:
    x = np.arange(1, 7).reshape(2, 3)
    t = ert.asarray(x)
    got = ert.cumulative_prod(t, axis=1, include_initial=True).numpy()
    np.testing.assert_array_equal(got, [[1, 1, 2, 6], [1, 4, 20, 120]])
    got = ert.cumulative_sum(t, axis=-2, include_initial=True).numpy()
    np.testing.assert_array_equal(got, [[0, 0, 0], [1, 2, 3], [5, 7, 9]])
    empty = ert.cumulative_sum(ert.zeros(0), include_initial=True)
    assert empty.shape == (1,) and empty.numpy().tolist() == [0.0]
    with pytest.raises(ert.ShapeError):
        ert.cumulative_sum(t)  # a 2-d tensor needs axis=
    with pytest.raises(ert.ShapeError):
        ert.cumulative_sum(ert.asarray(3))
    with pytest.raises(ert.OutOfBoundsError):
        ert.cumulative_prod(t, axis=2)


def test_all_any_diff() -> None:
    assert ert.all(ert.zeros((0, 2))).item() is True
    assert ert.any(ert.zeros((0, 2))).item() is False
    assert ert.all(ert.asarray([NAN, 1.0])).item() is True  # NaN is nonzero
    assert ert.any(ert.asarray([0.0, -0.0])).item() is False
    np.testing.assert_array_equal(
        ert.any(ert.asarray([[0, 1], [0, 0]]), axis=-1, keepdims=True).numpy(), [[True], [False]]
    )
    x = np.array([[1, 3, 6], [2, 2, 7]], dtype=np.int8)
    t = ert.asarray(x)
    np.testing.assert_array_equal(ert.diff(t, n=2).numpy(), np.diff(x, n=2))
    np.testing.assert_array_equal(
        ert.diff(t, axis=0, append=ert.asarray(np.int8([[0, 0, 0]]))).numpy(),
        np.diff(x, axis=0, append=np.int8([[0, 0, 0]])),
    )
    assert ert.diff(t, n=0) is t
    assert ert.diff(_t([True, False, False])).numpy().tolist() == [True, False]
    for bad, error in (
        (lambda: ert.diff(ert.asarray(1)), ert.ShapeError),
        (lambda: ert.diff(t, n=-1), ert.ArgumentError),
        (lambda: ert.diff(t, n=1.0), ert.ArgumentError),
        (lambda: ert.diff(t, axis=2), ert.OutOfBoundsError),
        (lambda: ert.diff(t, prepend=ert.ones((2, 2, 1))), ert.ShapeError),
    ):
        with pytest.raises(error):
            bad()


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda t: ert.sum(t, axis=2), ert.OutOfBoundsError),
        (lambda t: ert.mean(t, axis=(0, 0)), ert.ShapeError),
        (lambda t: ert.max(ert.zeros((0, 2)), axis=0), ert.ShapeError),
        (lambda t: ert.min(t, axis=1.0), ert.DTypeError),
        (lambda t: ert.all(t, axis=-3), ert.OutOfBoundsError),
        (lambda t: ert.argmax(t, axis=(0, 1)), ert.DTypeError),
        (lambda t: ert.argmin(ert.zeros(0)), ert.ShapeError),
        (lambda t: ert.sum(t, bogus=1), TypeError),
        (lambda t: ert.sum(t, out=ert.zeros(())), ert.DTypeError),
    ],
)
def test_statistical_errors_at_the_call(
    make: Callable[[ert.Tensor], Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        make(ert.ones((2, 3)))


# -- searching ------------------------------------------------------------------------------
def test_argmax_argmin_keepdims_and_counts() -> None:
    x = np.array([[1, 7, 7], [9, 0, 9]])
    t = ert.asarray(x)
    got = ert.argmax(t, axis=1, keepdims=True)
    assert got.dtype == np.int64 and got.numpy().tolist() == [[1], [0]]
    assert ert.argmin(t, keepdims=True).numpy().tolist() == [[4]]
    count = ert.count_nonzero(t)
    assert (count.shape, count.dtype, count.item()) == ((), np.int64, 5)
    assert ert.count_nonzero(ert.asarray([NAN, 0.0])).item() == 1


def test_nonzero() -> None:
    x = np.array([[0, 2, 0], [3, 0, 4]])
    got = ert.nonzero(ert.asarray(x))
    assert isinstance(got, tuple) and len(got) == 2
    for g, want in zip(got, np.nonzero(x), strict=True):
        assert g.dtype == np.int64 and g.is_ready()
        np.testing.assert_array_equal(g.numpy(), want)
    assert [g.shape for g in ert.nonzero(ert.zeros((2, 0, 3)))] == [(0,), (0,), (0,)]
    with pytest.raises(ert.ShapeError):
        ert.nonzero(ert.asarray(1))


def test_searchsorted() -> None:
    x1 = ert.asarray([1.0, 2.0, 2.0, 3.0])
    assert ert.searchsorted(x1, 2.0).item() == 1
    assert ert.searchsorted(x1, 2, side="right").item() == 3
    got = ert.searchsorted(x1, ert.asarray([[0.5, 2.5], [3.0, 9.0]]))
    assert (got.shape, got.dtype) == ((2, 2), np.int64)
    assert got.numpy().tolist() == [[0, 3], [3, 4]]
    unsorted = ert.asarray([3, 1, 2])
    got = ert.searchsorted(unsorted, ert.asarray([2]), sorter=ert.argsort(unsorted))
    assert got.numpy().tolist() == [1]
    for bad, error in (
        (lambda: ert.searchsorted(ert.ones((2, 2)), 1.0), ert.ShapeError),
        (lambda: ert.searchsorted(x1, 1.0, side="middle"), ert.ShapeError),
        (lambda: ert.searchsorted(ert.asarray([1j]), 1.0), ert.DTypeError),
        (lambda: ert.searchsorted(x1, 1.0, sorter=ert.asarray([0, 1])), ert.DTypeError),
        (lambda: ert.searchsorted(x1, 1.0, sorter=ert.ones(4)), ert.DTypeError),
    ):
        with pytest.raises(error):
            bad()


def test_where_takes_python_scalars_and_broadcasts() -> None:
    cond = ert.asarray([[True], [False]])
    f32 = ert.asarray(np.float32([1.0, 2.0, 3.0]))
    got = ert.where(cond, f32, 0.5)
    assert (got.shape, got.dtype) == ((2, 3), np.float32)
    np.testing.assert_array_equal(got.numpy(), [[1, 2, 3], [0.5, 0.5, 0.5]])
    got = ert.where(cond, 7, ert.asarray(np.int8([1, 2, 3])))
    assert (got.shape, got.dtype) == ((2, 3), np.int8)
    assert ert.where(ert.asarray(True), 1.5, f32).dtype == np.float32
    assert ert.where(cond, True, ert.asarray([False])).dtype == np.bool_
    with pytest.raises(ert.ShapeError):
        ert.where(cond, f32, ert.ones(4))


# -- sorting ------------------------------------------------------------------------------
def test_descending_sorts_are_stable() -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 3, (4, 9))
    got = ert.argsort(ert.asarray(x), descending=True).numpy()
    for row, order in zip(x, got, strict=True):
        assert order.tolist() == sorted(range(9), key=lambda i, r=row: r[i], reverse=True)
    got0 = ert.argsort(ert.asarray(x), axis=0, descending=True).numpy()
    for col in range(9):
        column = x[:, col].tolist()
        assert got0[:, col].tolist() == sorted(range(4), key=column.__getitem__, reverse=True)
    # Equal signed zeros keep their order either way.
    z = ert.asarray([0.0, -0.0, 1.0, -0.0, 0.0])
    assert np.signbit(ert.sort(z).numpy()).tolist() == [False, True, True, False, False]
    assert np.signbit(ert.sort(z, descending=True).numpy()).tolist() == [
        False, False, True, True, False
    ]  # fmt: skip


def test_sorts_put_nans_last_ascending_first_descending() -> None:
    x = np.array([2.0, NAN, -1.0, NAN, 5.0])
    t = ert.asarray(x)
    np.testing.assert_array_equal(ert.sort(t).numpy(), [-1.0, 2.0, 5.0, NAN, NAN])
    np.testing.assert_array_equal(ert.sort(t, descending=True).numpy(), [NAN, NAN, 5.0, 2.0, -1.0])
    assert ert.argsort(t).numpy().tolist() == [2, 0, 4, 1, 3]
    assert ert.argsort(t, descending=True).numpy().tolist() == [1, 3, 4, 0, 2]
    strict = xps.sort(xps.asarray(x), descending=True)
    np.testing.assert_array_equal(ert.sort(t, descending=True).numpy(), np.asarray(strict))


def test_sort_edge_cases_and_errors() -> None:
    assert ert.sort(ert.zeros((2, 0))).shape == (2, 0)
    assert ert.argsort(ert.zeros((0,)), descending=True).numpy().tolist() == []
    assert ert.sort(ert.asarray([True, False, True]), descending=True).numpy().tolist() == [
        True, True, False
    ]  # fmt: skip
    u = ert.asarray(np.uint8([0, 255, 1]))
    assert ert.sort(u, descending=True).numpy().tolist() == [255, 1, 0]
    for bad, error in (
        (lambda: ert.sort(ert.asarray([1j, 2j])), ert.DTypeError),
        (lambda: ert.argsort(ert.asarray([1j])), ert.DTypeError),
        (lambda: ert.sort(ert.asarray(1.0)), ert.OutOfBoundsError),
        (lambda: ert.sort(ert.ones((2, 2)), axis=2), ert.OutOfBoundsError),
        (lambda: ert.sort(ert.ones(2), axis=None), ert.DTypeError),
        (lambda: ert.argsort(ert.ones(2), stable=None), ert.DTypeError),
        (lambda: ert.sort(ert.ones(2), descending="yes"), ert.DTypeError),
    ):
        with pytest.raises(error):
            bad()


# -- sets ---------------------------------------------------------------------------------
def test_unique_treats_nans_as_distinct() -> None:
    x = np.array([[2.0, NAN], [-0.0, 2.0], [NAN, 0.0]])
    t = ert.asarray(x)
    values = ert.unique_values(t).numpy()
    np.testing.assert_array_equal(values, [0.0, 2.0, NAN, NAN])
    res = ert.unique_all(t)
    np.testing.assert_array_equal(res.values.numpy(), [0.0, 2.0, NAN, NAN])
    assert res.counts.numpy().tolist() == [2, 2, 1, 1]
    assert res.indices.numpy().tolist() == [2, 0, 1, 4]  # first occurrences
    assert res.inverse_indices.shape == x.shape
    np.testing.assert_array_equal(res.values.numpy()[res.inverse_indices.numpy()], x)
    counts = ert.unique_counts(t)
    assert counts.counts.numpy().tolist() == [2, 2, 1, 1]
    inverse = ert.unique_inverse(t)
    assert inverse.inverse_indices.numpy().tolist() == [[1, 2], [0, 1], [3, 0]]
    # The same as the standard's reference.
    strict = xps.unique_counts(xps.asarray(x))
    assert sorted(np.asarray(strict.counts).tolist()) == sorted(counts.counts.numpy().tolist())


def test_unique_results_are_the_standards_namedtuples() -> None:
    x = ert.asarray([3, 1, 3])
    sx = xps.asarray([3, 1, 3])
    for name in ("unique_all", "unique_counts", "unique_inverse"):
        ours, theirs = getattr(ert, name)(x), getattr(xps, name)(sx)
        assert ours._fields == theirs._fields, name
        for field in ours._fields:
            got = getattr(ours, field)
            assert got.is_ready()
            assert got.dtype == (x.dtype if field == "values" else np.int64)
    assert ert.unique_inverse(x).inverse_indices.numpy().tolist() == [1, 0, 1]


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint64", "float32", "complex64", "complex128"])
def test_unique_dtypes_and_shapes(dtype: str) -> None:
    x = np.array([[1, 0, 1], [0, 1, 1]]).astype(dtype)
    res = ert.unique_all(ert.asarray(x))
    assert res.values.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(res.values.numpy(), np.array([0, 1]).astype(dtype))
    assert res.counts.numpy().tolist() == [2, 4]
    empty = ert.unique_all(ert.zeros((0, 3), dtype=dtype))
    assert [f.shape for f in empty] == [(0,), (0,), (0, 3), (0,)]
    scalar = ert.unique_inverse(ert.asarray(np.array(1).astype(dtype)))
    assert (scalar.values.shape, scalar.inverse_indices.shape) == ((1,), ())


def test_complex_nans_are_distinct_too() -> None:
    x = np.array([complex(NAN, 0), 1 + 1j, complex(NAN, 0), 1 + 1j])
    res = ert.unique_counts(ert.asarray(x))
    assert res.counts.numpy().tolist() == [2, 1, 1]


# -- asynchrony -----------------------------------------------------------------------------
_ASYNC_OPS: dict[str, tuple[Callable[[Any], Any], Callable[[np.ndarray], Any]]] = {
    # name: (eagerrt on a pending 2x3 float tensor, numpy on the same data)
    "asarray(dtype=)": (lambda t: ert.asarray(t, dtype="int64"), lambda x: x.astype(np.int64)),
    "asarray(copy=True)": (lambda t: ert.asarray(t, copy=True), lambda x: x),
    "tril": (lambda t: ert.tril(t, k=1), lambda x: np.tril(x, 1)),
    "meshgrid": (
        lambda t: ert.meshgrid(t[0], t[1])[1],
        lambda x: np.meshgrid(x[0], x[1])[1],
    ),
    "broadcast_arrays": (
        lambda t: ert.broadcast_arrays(t, ert.ones((4, 1, 1)))[0],
        lambda x: np.broadcast_to(x, (4, 2, 3)),
    ),
    "reshape(copy=True)": (
        lambda t: ert.reshape(t, (3, 2), copy=True),
        lambda x: x.reshape(3, 2),
    ),
    "flip": (lambda t: ert.flip(t, axis=1), lambda x: np.flip(x, 1)),
    "moveaxis": (lambda t: ert.moveaxis(t, 0, 1), lambda x: np.moveaxis(x, 0, 1)),
    "repeat(int)": (lambda t: ert.repeat(t, 2, axis=0), lambda x: np.repeat(x, 2, 0)),
    "repeat(tensor counts)": (
        lambda t: ert.repeat(t, ert.asarray([0, 1, 2]), axis=1),
        lambda x: np.repeat(x, [0, 1, 2], 1),
    ),
    "roll": (lambda t: ert.roll(t, 1, axis=1), lambda x: np.roll(x, 1, 1)),
    "tile": (lambda t: ert.tile(t, (2, 1)), lambda x: np.tile(x, (2, 1))),
    "unstack": (lambda t: ert.unstack(t, axis=1)[2], lambda x: x[:, 2]),
    "squeeze": (
        lambda t: ert.squeeze(ert.expand_dims(t, axis=1), axis=1),
        lambda x: x,
    ),
    "cumulative_sum": (
        lambda t: ert.cumulative_sum(t, axis=1, include_initial=True),
        lambda x: np.cumulative_sum(x, axis=1, include_initial=True),
    ),
    "cumulative_prod": (
        lambda t: ert.cumulative_prod(t, axis=0),
        lambda x: np.cumulative_prod(x, axis=0),
    ),
    "sum": (lambda t: ert.sum(t, axis=1), lambda x: np.sum(x, 1)),
    "var(correction=)": (lambda t: ert.var(t, correction=1), lambda x: np.var(x, ddof=1)),
    "all": (lambda t: ert.all(t, axis=0), lambda x: np.all(x, 0)),
    "any": (lambda t: ert.any(t, keepdims=True), lambda x: np.any(x, keepdims=True)),
    "diff": (
        lambda t: ert.diff(t, prepend=ert.zeros((2, 1))),
        lambda x: np.diff(x, prepend=np.zeros((2, 1))),
    ),
    "argmax": (lambda t: ert.argmax(t, axis=1), lambda x: np.argmax(x, 1)),
    "count_nonzero": (lambda t: ert.count_nonzero(t, axis=0), lambda x: np.count_nonzero(x, 0)),
    "searchsorted(x1 pending)": (
        lambda t: ert.searchsorted(t[0], ert.asarray([1.5])),
        lambda x: np.searchsorted(x[0], [1.5]),
    ),
    "searchsorted(x2 pending)": (
        lambda t: ert.searchsorted(ert.asarray([0.0, 2.0, 4.0]), t),
        lambda x: np.searchsorted([0.0, 2.0, 4.0], x),
    ),
    "sort": (lambda t: ert.sort(t, descending=True), lambda x: -np.sort(-x)),
    "argsort": (lambda t: ert.argsort(t, axis=0), lambda x: np.argsort(x, 0, kind="stable")),
}


@pytest.mark.parametrize("name", list(_ASYNC_OPS))
def test_shape_known_ops_stay_pending_on_a_pending_input(name: str, gate: Any) -> None:
    make, reference = _ASYNC_OPS[name]
    data = np.array([[3.0, 0.0, 1.0], [1.0, 5.0, 0.0]])
    g = gate()
    x = g(data)
    out = make(x)
    assert not x.is_ready()
    assert not out.is_ready(), f"{name} waited for its pending input"
    g.open()
    want = np.asarray(reference(data))
    assert (out.shape, out.dtype) == (want.shape, want.dtype)
    np.testing.assert_allclose(out.numpy(timeout=30), want)


def test_like_functions_read_only_the_metadata(gate: Any) -> None:
    g = gate()
    x = g(np.ones((2, 3), dtype=np.float32))
    made = [ert.zeros_like(x), ert.ones_like(x), ert.empty_like(x), ert.full_like(x, 2.0)]
    assert not x.is_ready()  # nothing waited for x
    assert [(t.shape, t.dtype) for t in made] == [((2, 3), np.float32)] * 4
    assert made[3].numpy().tolist() == [[2.0] * 3] * 2
    g.open()


@pytest.mark.parametrize(
    ("make", "reference"),
    [
        (lambda t: ert.nonzero(t)[1], lambda x: np.nonzero(x)[1]),
        (lambda t: ert.unique_values(t), lambda x: np.unique(x)),
        (lambda t: ert.unique_all(t).inverse_indices, lambda x: np.unique_inverse(x)[1]),
        (lambda t: ert.unique_counts(t).counts, lambda x: np.unique_counts(x)[1]),
        (lambda t: ert.unique_inverse(t).values, lambda x: np.unique_inverse(x)[0]),
        (
            lambda t: ert.repeat(ert.ones((2, 3)), t[0].astype("int64"), axis=1),
            lambda x: np.repeat(np.ones((2, 3)), x[0].astype(np.int64), axis=1),
        ),
    ],
    ids=["nonzero", "unique_values", "unique_all", "unique_counts", "unique_inverse", "repeat"],
)
def test_data_dependent_ops_wait_for_their_input(make: Any, reference: Any, gate: Any) -> None:
    data = np.array([[3.0, 0.0, 1.0], [1.0, 3.0, 0.0]])
    g = gate()
    x = g(data)
    timer = _open_soon(g)
    try:
        out = make(x)  # blocks until the gate opens
    finally:
        timer.join()
    assert out.is_ready()
    want = np.asarray(reference(data))
    assert out.shape == want.shape
    np.testing.assert_array_equal(out.numpy(), want)
