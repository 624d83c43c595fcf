"""Every op against numpy, from the one table in ``op_records.py``.

Each record runs in each of its dtypes and in three scheduling modes:

* ``inline``: the defaults (small ops run on the calling thread);
* ``threaded``: ``inline_threshold_ns=0``, so every op, including the one that
  makes the inputs, runs on a worker thread and the op under test parks on
  pending inputs;
* ``sync``: :func:`eagerrt.sync_mode`.

For every call the result's metadata (shape, dtype, known at the call) must equal
numpy's result's, the data the kernel produced must agree with that metadata, and
the values must match numpy within the record's tolerance. Where numpy has no loop
for the dtypes (a ``TypeError``), eagerrt must raise :class:`eagerrt.DTypeError`
at the call.
"""

from __future__ import annotations

import itertools
import math
import operator
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import eagerrt as ert
from op_records import (
    ALL,
    BINARY_UFUNCS,
    CREATION_CASES,
    FLOATS,
    MODES,
    RECORDS,
    CreationCase,
    OpRecord,
    as_input,
    check_result,
    expect_type_error,
    numpy_or_type_error,
    rand_default,
    result_data,
    run_mode,
)


def _seed(*parts: Any) -> int:
    return zlib.crc32("/".join(map(str, parts)).encode())


def run_record(rec: OpRecord, dtype: np.dtype[Any], mode: str) -> list[Any]:
    """Check every shape set of ``rec`` in ``dtype`` and ``mode``; return the data."""
    rng = np.random.default_rng(_seed(rec.name, dtype))
    results: list[Any] = []
    for shapes in rec.shapes:
        arrays = [
            gen(rng, shape, d)
            for gen, shape, d in zip(rec.gens, shapes, rec.dtypes_of_args(dtype), strict=True)
        ]
        originals = [a.copy() for a in arrays]
        what = f"{rec.name} on {', '.join(f'{a.dtype}{list(a.shape)}' for a in arrays)} ({mode})"
        expected = numpy_or_type_error(rec.np_fn, *arrays)
        with run_mode(mode):
            tensors = [as_input(a, mode) for a in arrays]
            if expected is None:
                expect_type_error(lambda tensors=tensors: rec.ert_fn(*tensors), what)
                results.append("TypeError")
                continue
            got = rec.ert_fn(*tensors)
            check_result(got, expected, rec.tol, what)
            results.append(result_data(got))
        for a, original in zip(arrays, originals, strict=True):
            np.testing.assert_array_equal(a, original, err_msg=f"{what}: input was modified")
    return results


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")


def _summary(exc: BaseException) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {' | '.join(lines[:3])}"


# -- the table ---------------------------------------------------------------------------
def test_table_is_well_formed() -> None:
    names = [rec.name for rec in RECORDS]
    assert len(names) == len(set(names)), "record names must be unique (they are test ids)"
    for rec in RECORDS:
        assert rec.shapes, rec.name
        assert rec.dtypes, rec.name


def test_table_covers_every_public_op() -> None:
    """Every op in ``eagerrt.__all__`` appears in the table (or in this file's own tests)."""
    covered = " ".join(rec.name for rec in RECORDS)
    elsewhere = {
        # creation and random: test_creation_matches_numpy / test_random_*
        "arange", "asarray", "empty", "empty_like", "eye", "full", "full_like", "linspace",
        "ones", "ones_like", "zeros", "zeros_like", "random",
        # tested in their own files: test_nn.py, test_linalg_fft.py, test_indexing.py,
        # test_interop.py
        "adaptive_avg_pool2d", "avg_pool2d", "batch_norm", "conv2d", "conv_transpose2d",
        "cross_entropy", "embedding", "group_norm", "interpolate", "layer_norm", "linear",
        "max_pool2d", "one_hot", "pad", "scaled_dot_product_attention", "silu", "softplus",
        "matrix_transpose", "vecdot", "take_along_axis", "from_dlpack",
        # tested in test_from_future.py: a tensor an outside future completes
        "from_future",
        # registry plumbing, not ops
        "GENERIC", "Op", "define_op", "elementwise_cost", "get_op", "registered_ops",
        "scaled_cost",
    }  # fmt: skip
    from eagerrt import ops

    missing = [name for name in ops.__all__ if name not in elsewhere and name not in covered]
    assert not missing, f"ops with no record: {missing}"


@pytest.mark.parametrize("rec", RECORDS, ids=lambda rec: rec.name)
def test_op_matches_numpy(rec: OpRecord) -> None:
    """One record, in each of its dtypes, in each mode; the modes give identical data.

    Every (dtype, mode) runs even when one fails; the failure lists them all.
    """
    failures = []
    for dtype in rec.dtypes:
        by_mode = {}
        for mode in MODES:
            try:
                by_mode[mode] = run_record(rec, dtype, mode)
            except Exception as exc:  # collect, report together below
                failures.append(f"[{dtype}, {mode}] {_summary(exc)}")
        if len(by_mode) == len(MODES):
            first = by_mode["inline"]
            for mode in MODES[1:]:
                if not _same(first, by_mode[mode]):
                    failures.append(f"[{dtype}, {mode}] data differs from inline mode's")
    if failures:
        pytest.fail(f"{rec.name}: {len(failures)} failing case(s)\n" + "\n".join(failures))


# -- promotion between dtypes -----------------------------------------------------------------
_PAIRS = list(itertools.product(ALL, ALL))


@pytest.mark.parametrize("name", sorted(BINARY_UFUNCS))
def test_binary_ufunc_promotion_matches_numpy(name: str) -> None:
    """Every pair of dtypes: result dtype (numpy's promotion) and values."""
    ufunc, (gen_a, gen_b) = BINARY_UFUNCS[name]
    op = getattr(ert, name)
    rng = np.random.default_rng(_seed("promote", name))
    for da, db in _PAIRS:
        a, b = gen_a(rng, (2, 3), da), gen_b(rng, (3,), db)
        what = f"{name}({da}, {db})"
        expected = numpy_or_type_error(ufunc, a, b)
        if expected is None:
            expect_type_error(lambda a=a, b=b: op(ert.asarray(a), ert.asarray(b)), what)
            continue
        check_result(op(ert.asarray(a), ert.asarray(b)), expected, 4, what)


_MIXED: dict[str, tuple[Callable[..., Any], Callable[..., Any], tuple[Any, ...]]] = {
    # name: (eagerrt, numpy, input shapes)
    "concat": (
        lambda a, b: ert.concat([a, b]),
        lambda a, b: np.concatenate([a, b]),
        ((2, 3), (1, 3)),
    ),
    "concat(axis=None)": (
        lambda a, b: ert.concat([a, b], axis=None),
        lambda a, b: np.concatenate([a, b], axis=None),
        ((2, 3), (2,)),
    ),
    "stack": (lambda a, b: ert.stack([a, b]), lambda a, b: np.stack([a, b]), ((3,), (3,))),
    "where": (
        lambda a, b: ert.where(ert.asarray([True, False, True]), a, b),
        lambda a, b: np.where([True, False, True], a, b),
        ((3,), (2, 3)),
    ),
    "matmul": (ert.matmul, np.matmul, ((2, 3), (3, 2))),
    "a @ b (batched)": (operator.matmul, operator.matmul, ((2, 2, 3), (3,))),
    "tensordot": (
        lambda a, b: ert.tensordot(a, b, axes=1),
        lambda a, b: np.tensordot(a, b, axes=1),
        ((2, 3), (3, 2)),
    ),
    "clip": (lambda a, b: ert.clip(a, b, b), lambda a, b: np.clip(a, b, b), ((2, 3), (3,))),
}


@pytest.mark.parametrize("name", sorted(_MIXED))
def test_mixed_dtype_ops_match_numpy(name: str) -> None:
    ert_fn, np_fn, (sa, sb) = _MIXED[name]
    rng = np.random.default_rng(_seed("mixed", name))
    for da, db in _PAIRS:
        a, b = rand_default(rng, sa, da), rand_default(rng, sb, db)
        what = f"{name}({da}, {db})"
        expected = numpy_or_type_error(np_fn, a, b)
        if expected is None:
            expect_type_error(lambda a=a, b=b: ert_fn(ert.asarray(a), ert.asarray(b)), what)
            continue
        check_result(ert_fn(ert.asarray(a), ert.asarray(b)), expected, 16, what)


# -- weak Python scalars and numpy scalars (NEP 50) ---------------------------------------------
@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda: ert.asarray(np.int8([1, 2])) * 2, "int8"),
        (lambda: 2 * ert.asarray(np.int8([1, 2])), "int8"),
        (lambda: ert.asarray(np.uint8([1, 2])) + 1, "uint8"),
        (lambda: ert.asarray(np.uint8([1, 2])) - True, "uint8"),
        (lambda: ert.asarray(np.float32([1, 2])) + 1.5, "float32"),
        (lambda: 1.5 - ert.asarray(np.float32([1, 2])), "float32"),
        (lambda: ert.asarray(np.float32([1, 2])) * 1j, "complex64"),
        (lambda: ert.asarray(np.int8([1, 2])) + 1.5, "float64"),
        (lambda: ert.asarray(np.int8([1, 2])) / 2, "float64"),
        (lambda: ert.asarray(np.int16([1, 2])) / 2, "float64"),
        (lambda: ert.asarray([True, False]) + 1, "int64"),
        (lambda: ert.asarray([True, False]) * 1.5, "float64"),
        (lambda: ert.logical_and(ert.asarray([True]), 1), "bool"),
        (lambda: ert.asarray(np.int8([1, 2])) ** 2, "int8"),
        (lambda: 2 ** ert.asarray(np.int8([1, 2])), "int8"),
        (lambda: ert.asarray(np.float32([1, 2])) ** 0.5, "float32"),
        (lambda: ert.asarray(np.int8([1, 2])) < 1.5, "bool"),
        (lambda: ert.asarray(np.int8([1, 2])) == 1000, "bool"),
        # numpy scalars are not weak
        (lambda: ert.asarray(np.int8([1, 2])) * np.int64(2), "int64"),
        (lambda: np.int64(2) * ert.asarray(np.int8([1, 2])), "int64"),
        (lambda: ert.asarray(np.float32([1, 2])) + np.float64(1.5), "float64"),
        (lambda: np.float64(1.5) + ert.asarray(np.float32([1, 2])), "float64"),
        (lambda: np.float32(1.5) * ert.asarray(np.int8([1, 2])), "float32"),
        (lambda: ert.asarray(np.int8([1, 2])) + np.array(2, dtype=np.int16), "int16"),
        # 0-d tensors are not weak either (unlike numpy 1.x's value-based casting)
        (lambda: ert.asarray(np.int8([1, 2])) + ert.asarray(np.int64(2)), "int64"),
        # scalars with scalars
        (lambda: ert.add(1, 2), "int64"),
        (lambda: ert.multiply(1.5, 2), "float64"),
        (lambda: ert.exp(1), "float64"),
        (lambda: ert.maximum(True, False), "bool"),
    ],
)
def test_scalar_promotion(make: Callable[[], ert.Tensor], expected: str) -> None:
    t = make()
    assert isinstance(t, ert.Tensor)
    assert t.dtype == np.dtype(expected)
    assert t.numpy().dtype == np.dtype(expected)


def test_scalar_results_match_numpy_values() -> None:
    x = np.array([-3, -1, 0, 2, 7], dtype=np.int8)
    t = ert.asarray(x)
    for got, want in [
        (t * 2, x * 2),
        (t // 2, x // 2),
        (t % 3, x % 3),
        (-7 // ert.asarray(np.int8([2, -2, 3])), -7 // np.int8([2, -2, 3])),
        (-7 % ert.asarray(np.int8([2, -2, 3])), -7 % np.int8([2, -2, 3])),
        (t - 1.5, x - 1.5),
        (2 ** ert.asarray(np.int8([0, 1, 6])), 2 ** np.int8([0, 1, 6])),
        (t == 2, x == 2),
        (operator.gt(2, t), operator.gt(2, x)),
        (-t, -x),
        (abs(t), abs(x)),
    ]:
        check_result(got, want)


def test_weak_scalar_wraps_like_numpy_for_arrays() -> None:
    """Integer arithmetic wraps in the tensor's dtype, as numpy's array arithmetic does."""
    x = np.array([100, 127, -128], dtype=np.int8)
    check_result(ert.asarray(x) * 2, x * 2)
    check_result(ert.asarray(x) + 100, x + 100)
    u = np.array([0, 1, 255], dtype=np.uint8)
    check_result(ert.asarray(u) - 1, u - 1)


def test_weak_scalar_out_of_range_fails_at_the_call() -> None:
    """numpy 2 raises OverflowError for ``int8_array + 300`` at the call; so does eagerrt."""
    x = ert.asarray(np.int8([1, 2]))
    with pytest.raises(OverflowError):
        np.int8([1, 2]) + 300
    for bad in (lambda: x + 300, lambda: 300 + x, lambda: x * -129, lambda: ert.maximum(x, 1000)):
        with pytest.raises(ert.ValueRangeError, match="out of bounds for int8") as info:
            bad()
        assert isinstance(info.value, OverflowError)
    u = ert.asarray(np.uint8([1]))
    with pytest.raises(OverflowError):
        u - (-1)
    np.testing.assert_array_equal((x + 127).numpy(), np.int8([1, 2]) + 127)


def test_comparison_with_none_falls_back_to_identity() -> None:
    t = ert.asarray([1.0, 2.0])
    assert (t == None) is False  # noqa: E711
    assert (t != None) is True  # noqa: E711


# -- argument forms numpy accepts --------------------------------------------------------------
def test_reductions_take_axis_positionally() -> None:
    """``np.sum(t, 0)``: numpy's functions pass the axis on to the tensor's method;
    the ops behind ``ert.sum`` & co. (``fn.op``) bind it positionally, as numpy."""
    x = np.arange(24.0).reshape(2, 3, 4)
    t = ert.asarray(x)
    check_result(np.sum(t, 0), np.sum(x, 0), what="np.sum(t, 0)")
    check_result(np.mean(t, 1), np.mean(x, 1), what="np.mean(t, 1)")
    check_result(np.max(t, (0, 2)), np.max(x, (0, 2)), what="np.max(t, (0, 2))")
    check_result(np.argmax(t, 2), np.argmax(x, 2), what="np.argmax(t, 2)")
    check_result(ert.sum.op(t, 0), np.sum(x, 0), what="sum.op(t, 0)")
    check_result(ert.argmax.op(t, 2), np.argmax(x, 2), what="argmax.op(t, 2)")


def test_transpose_takes_axes_positionally() -> None:
    x = np.arange(6).reshape(2, 3)
    check_result(ert.transpose(ert.asarray(x), (1, 0)), np.transpose(x, (1, 0)))
    check_result(ert.transpose(ert.asarray(x), [1, 0]), np.transpose(x, [1, 0]))


def test_tensordot_takes_axes_pair_positionally() -> None:
    """numpy's positional ``axes`` through the op (``tensordot.op``); the function
    itself takes it keyword-only, as the Array API says."""
    a, b = np.arange(6.0).reshape(2, 3), np.arange(6.0).reshape(3, 2)
    ta, tb = ert.asarray(a), ert.asarray(b)
    check_result(ert.tensordot.op(ta, tb, ([1], [0])), np.tensordot(a, b, ([1], [0])))
    check_result(ert.tensordot.op(ta, tb, 1), np.tensordot(a, b, 1))
    check_result(ert.tensordot(ta, tb, axes=1), np.tensordot(a, b, 1))


@pytest.mark.parametrize("dtype", ["float32", np.float32, np.dtype("float32"), float, "i1", bool])
def test_astype_takes_dtype_positionally(dtype: Any) -> None:
    x = np.array([[1.5, 2.0], [0.0, 3.0]])
    t = ert.asarray(x)
    check_result(ert.astype(t, dtype), x.astype(dtype))
    check_result(t.astype(dtype), x.astype(dtype))


def test_asarray_of_a_tensor_with_dtype_or_copy() -> None:
    x = np.array([1.5, 2.5])
    t = ert.asarray(x)
    assert ert.asarray(t) is t
    check_result(ert.asarray(t, dtype="int32"), np.asarray(x, dtype="int32"))
    copied = ert.asarray(t, copy=True)
    check_result(copied, x)
    assert not np.shares_memory(copied.numpy(), t.numpy())


@pytest.mark.parametrize("bound", ["min", "max"])
def test_clip_with_one_bound(bound: str) -> None:
    x = np.array([-2.0, 0.5, 3.0])
    got = ert.clip(ert.asarray(x), **{bound: 1.0})
    check_result(got, np.clip(x, **{bound: 1.0}))


_NP_INT_AXES: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    # numpy integers (e.g. from shape arithmetic) work wherever a Python int does
    "sum": (lambda t: ert.sum(t, axis=np.int64(0)), lambda x: np.sum(x, axis=np.int64(0))),
    "mean(tuple)": (
        lambda t: ert.mean(t, axis=(np.int64(0), np.int32(-1))),
        lambda x: np.mean(x, axis=(np.int64(0), np.int32(-1))),
    ),
    "argmax": (lambda t: ert.argmax(t, axis=np.int64(-1)), lambda x: np.argmax(x, axis=-1)),
    "expand_dims": (
        lambda t: ert.expand_dims(t, axis=np.int64(0)),
        lambda x: np.expand_dims(x, np.int64(0)),
    ),
    "squeeze": (lambda t: ert.squeeze(t, axis=np.int64(0)), lambda x: np.squeeze(x, 0)),
    "softmax": (
        lambda t: ert.softmax(t, axis=np.int64(1)),
        lambda x: np.exp(x) / np.exp(x).sum(axis=1, keepdims=True),
    ),
    "concat": (
        lambda t: ert.concat([t, t], axis=np.int64(-1)),
        lambda x: np.concatenate([x, x], axis=np.int64(-1)),
    ),
    "stack": (lambda t: ert.stack([t, t], axis=np.int64(1)), lambda x: np.stack([x, x], 1)),
    "split": (
        lambda t: ert.split(t, np.int64(2), axis=np.int64(1)),
        lambda x: np.split(x, np.int64(2), axis=np.int64(1)),
    ),
    "take": (
        lambda t: ert.take(t, ert.asarray([0]), axis=np.int64(2)),
        lambda x: np.take(x, [0], axis=np.int64(2)),
    ),
    "transpose": (
        lambda t: ert.transpose(t, axes=(np.int64(2), 0, 1)),
        lambda x: np.transpose(x, (np.int64(2), 0, 1)),
    ),
    "tensordot": (
        lambda t: ert.tensordot(t, t, axes=np.int64(0)),
        lambda x: np.tensordot(x, x, axes=np.int64(0)),
    ),
    "reshape": (lambda t: t.reshape(np.int64(6)), lambda x: x.reshape(np.int64(6))),
    "getitem": (lambda t: t[np.int64(0), np.int32(1)], lambda x: x[np.int64(0), np.int32(1)]),
}


@pytest.mark.parametrize("name", sorted(_NP_INT_AXES))
def test_numpy_integer_axes(name: str) -> None:
    x = np.arange(6.0).reshape(1, 2, 3)
    ert_fn, np_fn = _NP_INT_AXES[name]
    check_result(ert_fn(ert.asarray(x)), np_fn(x), 4, name)


def test_arg_reduction_over_a_nonempty_axis_of_an_empty_tensor() -> None:
    """``np.argmax(np.zeros((0, 3)), axis=1)`` is an empty int array, not an error."""
    x = np.zeros((0, 3))
    check_result(ert.argmax(ert.asarray(x), axis=1), np.argmax(x, axis=1))
    check_result(ert.argmin(ert.asarray(x), axis=1), np.argmin(x, axis=1))


_BYTE_ORDER_OPS: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    "add": (lambda t: t + t, lambda x: x + x),
    "exp": (ert.exp, np.exp),
    "sum": (lambda t: t.sum(), np.sum),
    "prod(axis=0)": (lambda t: ert.prod(t, axis=0), lambda x: np.prod(x, axis=0)),
    "mean": (ert.mean, np.mean),
    "max(axis=1)": (lambda t: ert.max(t, axis=1), lambda x: np.max(x, axis=1)),
    "var": (ert.var, np.var),
    "argmax": (ert.argmax, np.argmax),
    "matmul": (lambda t: t @ t.T, lambda x: x @ x.T),
    "round": (ert.round, np.round),
    "relu": (ert.relu, lambda x: np.maximum(x, 0)),
    "t[0]": (lambda t: t[0], lambda x: x[0]),
    "reshape": (lambda t: t.reshape(-1), lambda x: x.reshape(-1)),
    "T": (lambda t: t.T, lambda x: x.T),
    "concat": (lambda t: ert.concat([t, t]), lambda x: np.concatenate([x, x])),
    "take": (lambda t: ert.take(t, ert.asarray([1])), lambda x: np.take(x, [1])),
}


@pytest.mark.parametrize("dtype", [">f8", ">i4"])
@pytest.mark.parametrize("name", sorted(_BYTE_ORDER_OPS))
def test_non_native_byte_order_input(name: str, dtype: str) -> None:
    """``asarray`` accepts big-endian arrays and stores them in native byte order, so
    every result's metadata matches its data (numpy's own views would keep ``>``)."""
    x = np.arange(1, 7, dtype=dtype).reshape(2, 3)
    t = ert.asarray(x)
    assert t.dtype.isnative and t.dtype == x.dtype.newbyteorder("=")
    ert_fn, np_fn = _BYTE_ORDER_OPS[name]
    native = x.astype(x.dtype.newbyteorder("="))
    check_result(ert_fn(t), np_fn(native), 4, f"{name}({dtype})")


def test_threaded_mode_really_offloads_and_parks() -> None:
    """The harness's threaded mode: inputs pending, the op under test parked, then run."""
    before = ert.stats()
    with run_mode("threaded"):
        a = as_input(np.ones((3, 3)), "threaded")
        out = ert.add(a, a)
        assert out.dtype == np.float64
        out.numpy()
    after = ert.stats()
    assert after.ops_offloaded >= before.ops_offloaded + 2


# -- creation ---------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CREATION_CASES, ids=lambda c: c.name)
def test_creation_matches_numpy(case: CreationCase) -> None:
    expected = np.asarray(case.np_fn())
    for mode in MODES:
        with run_mode(mode):
            got = case.ert_fn()
            if case.name.startswith("empty"):  # contents unspecified
                assert isinstance(got, ert.Tensor)
                assert (got.shape, got.dtype) == (expected.shape, expected.dtype)
                data = got.numpy()
                assert (data.shape, data.dtype) == (expected.shape, expected.dtype)
                continue
            check_result(got, expected, 1, f"{case.name} ({mode})")


def test_creation_accepts_numpy_shape_forms() -> None:
    assert ert.zeros(np.int64(3)).shape == (3,)
    assert ert.ones((np.int64(2), 3)).shape == (2, 3)
    assert ert.zeros([]).shape == ()
    assert ert.eye(np.int64(2)).shape == (2, 2)


# -- random ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", FLOATS)
def test_random_uniform(dtype: np.dtype[Any], mode: str) -> None:
    with run_mode(mode):
        t = ert.random.uniform((200, 50), -2.0, 3.0, dtype=dtype, seed=7)
        assert (t.shape, t.dtype) == ((200, 50), dtype)
        x = t.numpy()
    assert x.dtype == dtype
    assert x.min() >= -2.0
    assert x.max() < 3.0
    assert abs(float(x.mean()) - 0.5) < 0.1
    assert np.array_equal(x, ert.random.uniform((200, 50), -2.0, 3.0, dtype=dtype, seed=7).numpy())
    assert not np.array_equal(
        x, ert.random.uniform((200, 50), -2.0, 3.0, dtype=dtype, seed=8).numpy()
    )


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", FLOATS)
def test_random_normal(dtype: np.dtype[Any], mode: str) -> None:
    with run_mode(mode):
        t = ert.random.normal((100, 100), 1.0, 2.0, dtype=dtype, seed=3)
        assert (t.shape, t.dtype) == ((100, 100), dtype)
        x = t.numpy()
    assert x.dtype == dtype
    assert abs(float(x.mean()) - 1.0) < 0.1
    assert abs(float(x.std()) - 2.0) < 0.1
    assert np.array_equal(x, ert.random.normal((100, 100), 1.0, 2.0, dtype=dtype, seed=3).numpy())


def test_random_defaults_and_shapes() -> None:
    u = ert.random.uniform(5)
    assert (u.shape, u.dtype) == ((5,), np.dtype("float64"))
    assert ert.random.normal(()).shape == ()
    assert ert.random.normal((0, 3)).numpy().shape == (0, 3)
    x = u.numpy()
    assert ((x >= 0) & (x < 1)).all()


def test_random_seed_makes_sequences_reproducible() -> None:
    ert.random.seed(1234)
    first = [ert.random.uniform((3,)).numpy() for _ in range(3)]
    ert.random.seed(1234)
    with ert.config.override(inline_threshold_ns=0):  # same numbers whatever thread fills them
        second = [ert.random.uniform((3,)) for _ in range(3)]
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b.numpy())
    assert not np.array_equal(first[0], first[1])


def test_random_rejects_non_float_dtypes() -> None:
    with pytest.raises(ert.DTypeError):
        ert.random.uniform((2,), dtype="int32")
    with pytest.raises(ert.DTypeError):
        ert.random.normal((2,), dtype="nope")


# -- softmax: both kernels ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("cols", [5, 16, 40])
@pytest.mark.parametrize("axis", [-1, 0])
def test_softmax_is_stable_and_normalised(dtype: np.dtype[Any], cols: int, axis: int) -> None:
    x = np.full((3, cols), 1000.0, dtype=dtype)
    x[:, 0] = 990.0
    s = ert.softmax(ert.asarray(x), axis=axis).numpy()
    ls = ert.log_softmax(ert.asarray(x), axis=axis).numpy()
    assert s.dtype == ls.dtype == dtype
    assert np.isfinite(s).all()
    assert np.isfinite(ls).all()
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(s.sum(axis=axis), 1.0, rtol=rtol)
    np.testing.assert_allclose(np.exp(ls.astype(np.float64)), s, rtol=100 * rtol, atol=1e-7)


def test_softmax_fused_and_numpy_kernels_agree() -> None:
    x = np.random.default_rng(0).normal(0, 3, (8, 32))
    fused = ert.softmax(ert.asarray(x), axis=-1).numpy()  # last axis, >= 16 columns
    numpy_path = ert.softmax(ert.asarray(x.T), axis=0).numpy().T  # another axis
    np.testing.assert_allclose(fused, numpy_path, rtol=1e-12)
    fused = ert.log_softmax(ert.asarray(x), axis=-1).numpy()
    numpy_path = ert.log_softmax(ert.asarray(x.T), axis=0).numpy().T
    np.testing.assert_allclose(fused, numpy_path, rtol=1e-12)


def test_softmax_of_non_contiguous_input() -> None:
    x = np.random.default_rng(1).normal(size=(20, 40))
    view = x[::2, ::-2]  # (10, 20): the fused kernel, on a strided input
    expected = np.exp(view - view.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    check_result(ert.softmax(ert.asarray(view)), expected)


# -- long chains, pending inputs -----------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_chain_of_dependent_ops_matches_numpy(mode: str) -> None:
    rng = np.random.default_rng(5)
    x = rng.normal(size=(30, 40))
    w = rng.normal(size=(40, 20)) / 10
    with run_mode(mode):
        t = ert.asarray(x)
        h = ert.relu(t @ ert.asarray(w) + 0.5)
        for _ in range(20):
            h = ert.tanh(h * 1.1 - 0.01) + h.mean(axis=0, keepdims=True)
        out = ert.log_softmax(h, axis=-1).sum(axis=1)
    ref = np.maximum(x @ w + 0.5, 0)
    for _ in range(20):
        ref = np.tanh(ref * 1.1 - 0.01) + ref.mean(axis=0, keepdims=True)
    shifted = ref - ref.max(-1, keepdims=True)
    ref = (shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))).sum(axis=1)
    check_result(out, ref, 1000)


def test_large_ops_offloaded_match_numpy() -> None:
    """Ops big enough to go to worker threads by default."""
    rng = np.random.default_rng(6)
    a = rng.normal(size=(300, 400)).astype(np.float32)
    b = rng.normal(size=(400, 200)).astype(np.float32)
    ta, tb = ert.asarray(a), ert.asarray(b)
    check_result(ta @ tb, a @ b, 100)
    check_result(ert.exp(ta * 0.1).sum(axis=0), np.exp(a * np.float32(0.1)).sum(axis=0), 100)
    check_result(ert.softmax(ta), _softmax64(a).astype(np.float32), 10)


def _softmax64(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# -- call-time errors ------------------------------------------------------------------------------------
def _t(*shape: int, dtype: str = "float64") -> ert.Tensor:
    return ert.asarray(np.ones(shape, dtype=dtype))


_CALL_ERRORS: list[tuple[str, Callable[[], Any], type[Exception]]] = [
    # mismatched shapes
    ("add (2,3)+(4,)", lambda: ert.add(_t(2, 3), _t(4)), ert.ShapeError),
    ("t + t mismatched", lambda: _t(2, 3) + _t(3, 2), ert.ShapeError),
    ("t * ndarray mismatched", lambda: _t(2, 3) * np.ones(2), ert.ShapeError),
    ("where mismatched", lambda: ert.where(_t(2, dtype="bool"), _t(3), _t(3)), ert.ShapeError),
    ("matmul inner", lambda: _t(2, 3) @ _t(2, 3), ert.ShapeError),
    ("matmul 1-d inner", lambda: ert.matmul(_t(3), _t(4)), ert.ShapeError),
    ("matmul batch", lambda: ert.matmul(_t(2, 2, 3), _t(3, 3, 4)), ert.ShapeError),
    ("matmul 0-d", lambda: ert.matmul(_t(), _t(3)), ert.ShapeError),
    ("tensordot dims", lambda: ert.tensordot(_t(2, 3), _t(2, 3), axes=1), ert.ShapeError),
    ("tensordot axes too many", lambda: ert.tensordot(_t(2), _t(2), axes=2), ert.ShapeError),
    ("concat shapes", lambda: ert.concat([_t(2, 3), _t(2, 4)]), ert.ShapeError),
    ("concat ndim", lambda: ert.concat([_t(2, 3), _t(3)]), ert.ShapeError),
    ("concat 0-d", lambda: ert.concat([_t(), _t()]), ert.ShapeError),
    ("concat nothing", lambda: ert.concat([]), ert.ShapeError),
    ("stack shapes", lambda: ert.stack([_t(2), _t(3)]), ert.ShapeError),
    ("stack nothing", lambda: ert.stack([]), ert.ShapeError),
    ("reshape size", lambda: ert.reshape(_t(2, 3), shape=(4,)), ert.ShapeError),
    ("reshape two -1", lambda: _t(2, 3).reshape(-1, -1), ert.ShapeError),
    ("reshape -1 no fit", lambda: _t(2, 3).reshape(4, -1), ert.ShapeError),
    ("broadcast_to", lambda: ert.broadcast_to(_t(2, 3), shape=(3, 3)), ert.ShapeError),
    ("broadcast_to fewer dims", lambda: ert.broadcast_to(_t(2, 3), shape=(3,)), ert.ShapeError),
    ("transpose not a permutation", lambda: ert.transpose(_t(2, 3), axes=(0, 0)), ert.ShapeError),
    ("transpose wrong length", lambda: _t(2, 3).transpose(1, 0, 2), ert.ShapeError),
    ("squeeze non-1", lambda: ert.squeeze(_t(2, 1), axis=0), ert.ShapeError),
    ("split unequal", lambda: ert.split(_t(5), 2), ert.ShapeError),
    ("split zero sections", lambda: ert.split(_t(4), 0), ert.ShapeError),
    # bad axes
    ("sum axis 2 of 2-d", lambda: ert.sum(_t(2, 3), axis=2), ert.ShapeError),
    ("sum axis -3 of 2-d", lambda: ert.sum(_t(2, 3), axis=-3), ert.ShapeError),
    ("sum repeated axis", lambda: ert.sum(_t(2, 3), axis=(0, -2)), ert.ShapeError),
    ("t.mean bad axis", lambda: _t(2, 3).mean(axis=5), ert.ShapeError),
    ("var bad axis", lambda: ert.var(_t(2, 3), axis=(0, 3)), ert.ShapeError),
    ("argmax bad axis", lambda: ert.argmax(_t(2, 3), axis=2), ert.ShapeError),
    ("softmax bad axis", lambda: ert.softmax(_t(2, 3), axis=2), ert.ShapeError),
    ("log_softmax bad axis", lambda: ert.log_softmax(_t(2, 3), axis=-3), ert.ShapeError),
    ("expand_dims bad axis", lambda: ert.expand_dims(_t(2, 3), axis=3), ert.ShapeError),
    ("squeeze bad axis", lambda: ert.squeeze(_t(1, 3), axis=2), ert.ShapeError),
    ("concat bad axis", lambda: ert.concat([_t(2), _t(2)], axis=1), ert.ShapeError),
    ("stack bad axis", lambda: ert.stack([_t(2), _t(2)], axis=2), ert.ShapeError),
    ("split bad axis", lambda: ert.split(_t(2, 2), 2, axis=2), ert.ShapeError),
    ("take bad axis", lambda: ert.take(_t(2, 2), ert.asarray([0]), axis=2), ert.ShapeError),
    (
        "tensordot bad axis",
        lambda: ert.tensordot(_t(2, 3), _t(3, 2), axes=([2], [0])),
        ert.ShapeError,
    ),
    # reductions with no identity over nothing
    ("max of empty", lambda: ert.max(_t(0)), ert.ShapeError),
    ("min of empty", lambda: ert.min(_t(0, 3)), ert.ShapeError),
    ("max over an empty axis", lambda: ert.max(_t(0, 3), axis=0), ert.ShapeError),
    ("t.min of empty", lambda: _t(2, 0).min(axis=1), ert.ShapeError),
    ("argmax of empty", lambda: ert.argmax(_t(0)), ert.ShapeError),
    ("argmin of empty", lambda: ert.argmin(_t(3, 0)), ert.ShapeError),
    # bad dtypes
    ("zeros dtype", lambda: ert.zeros((2,), dtype="nope"), ert.DTypeError),
    ("ones dtype", lambda: ert.ones(2, dtype="float99"), ert.DTypeError),
    ("full dtype", lambda: ert.full((2,), 1, dtype="nope"), ert.DTypeError),
    ("eye dtype", lambda: ert.eye(2, dtype="nope"), ert.DTypeError),
    ("arange dtype", lambda: ert.arange(3, dtype="nope"), ert.DTypeError),
    ("linspace dtype", lambda: ert.linspace(0, 1, 3, dtype="nope"), ert.DTypeError),
    ("zeros_like dtype", lambda: ert.zeros_like(_t(2), dtype="nope"), ert.DTypeError),
    ("astype dtype", lambda: ert.astype(_t(2), "nope"), ert.DTypeError),
    ("t.astype dtype", lambda: _t(2).astype("nope"), ert.DTypeError),
    ("asarray dtype", lambda: ert.asarray([1, 2], dtype="nope"), ert.DTypeError),
    ("asarray of strings", lambda: ert.asarray(["a", "b"]), ert.DTypeError),
    ("asarray of objects", lambda: ert.asarray([object()]), ert.DTypeError),
    ("asarray of None", lambda: ert.asarray(None), ert.DTypeError),
    ("random dtype", lambda: ert.random.uniform((2,), dtype="nope"), ert.DTypeError),
    ("negative of bool", lambda: -_t(2, dtype="bool"), ert.DTypeError),
    ("subtract bools", lambda: _t(2, dtype="bool") - _t(2, dtype="bool"), ert.DTypeError),
    ("floor of complex", lambda: ert.floor(_t(2, dtype="complex128")), ert.DTypeError),
    ("remainder of complex", lambda: _t(2, dtype="complex128") % 2, ert.DTypeError),
    ("take float indices", lambda: ert.take(_t(3), ert.asarray([0.0])), ert.DTypeError),
    ("add a string", lambda: _t(2) + "a", ert.DTypeError),
    ("add an object", lambda: ert.add(_t(2), object()), ert.DTypeError),
    ("sum float axis", lambda: ert.sum(_t(2), axis=0.5), ert.DTypeError),
    ("matmul by a scalar", lambda: _t(2) @ 2, (ert.DTypeError, ert.ShapeError)),
    ("gelu approximate", lambda: ert.gelu(_t(2), approximate="fast"), ert.ShapeError),
    ("reduction bad dtype", lambda: ert.sum(_t(2), dtype="U3"), ert.DTypeError),
    ("float index", lambda: _t(3)[1.5], ert.DTypeError),
    ("float array index", lambda: _t(3)[ert.asarray([0.5])], ert.DTypeError),
    ("string index", lambda: _t(3)["a"], ert.DTypeError),
    ("mask of the wrong shape", lambda: _t(3)[ert.asarray([True, False])], ert.OutOfBoundsError),
    # shapes for creation
    ("zeros negative dim", lambda: ert.zeros((2, -1)), ert.ShapeError),
    ("arange step 0", lambda: ert.arange(0, 3, 0), ert.ShapeError),
    ("linspace negative num", lambda: ert.linspace(0, 1, -1), ert.ShapeError),
    # out-of-range basic indexes
    ("index 3 of 3", lambda: _t(3)[3], ert.OutOfBoundsError),
    ("index -4 of 3", lambda: _t(3)[-4], ert.OutOfBoundsError),
    ("index (0, 5)", lambda: _t(2, 3)[0, 5], ert.OutOfBoundsError),
    ("too many indices", lambda: _t(2, 3)[0, 0, 0], ert.OutOfBoundsError),
    ("index a 0-d", lambda: _t()[0], ert.OutOfBoundsError),
    ("index an empty axis", lambda: _t(0, 3)[0], ert.OutOfBoundsError),
    ("getitem op", lambda: ert.getitem(_t(3), index=(Ellipsis, 7)), ert.OutOfBoundsError),
    ("two ellipses", lambda: _t(3)[..., ...], ert.OutOfBoundsError),
]
_NUMPY_BASE = {
    ert.ShapeError: ValueError,
    ert.DTypeError: TypeError,
    ert.OutOfBoundsError: IndexError,
}


@pytest.mark.parametrize("mode", ["inline", "threaded"])
@pytest.mark.parametrize(("make", "exc"), [pytest.param(m, e, id=n) for n, m, e in _CALL_ERRORS])
def test_call_time_errors(make: Callable[[], Any], exc: Any, mode: str) -> None:
    """Bad calls raise at the call, synchronously (with pending inputs too)."""
    with run_mode(mode), pytest.raises(exc) as info:
        make()
    assert isinstance(info.value, ert.UsageError)
    base = _NUMPY_BASE.get(type(info.value))
    if base is not None:
        assert isinstance(info.value, base)


def test_error_classes_are_numpy_compatible() -> None:
    assert issubclass(ert.ShapeError, ValueError)
    assert issubclass(ert.DTypeError, TypeError)
    assert issubclass(ert.OutOfBoundsError, IndexError)
    assert issubclass(ert.OutOfBoundsError, ert.ShapeError)
    assert issubclass(ert.KernelError, ert.EagerError)


def test_call_time_error_names_op_and_operands() -> None:
    with pytest.raises(ert.ShapeError) as info:
        ert.add(_t(2, 3), _t(4))
    message = str(info.value)
    assert "add" in message
    assert "(2, 3)" in message or "[2, 3]" in message
    assert "test_ops.py" in message  # the user's line


def test_shape_errors_with_pending_inputs_raise_at_call() -> None:
    gate = _Gate()
    a = gate.tensor((2, 3))
    try:
        assert not a.is_ready()
        with pytest.raises(ert.ShapeError):
            a + ert.ones((4,))
        with pytest.raises(ert.ShapeError):
            a @ ert.ones((2,))
        with pytest.raises(ert.OutOfBoundsError):
            a[5]
        b = a.sum(axis=0)  # metadata is there before the data
        assert (b.shape, b.dtype) == ((3,), np.dtype("float64"))
        assert not b.is_ready()
    finally:
        gate.open()
    np.testing.assert_array_equal(b.numpy(), np.full(3, 2.0))


class _Gate:
    """A tensor that stays pending until ``open()``: a worker blocks on an event."""

    _op: Any = None

    def __init__(self) -> None:
        import threading

        self.event = threading.Event()
        if _Gate._op is None:
            op = ert.registered_ops().get("test_ops_gate")
            if op is None:
                op = ert.define_op("test_ops_gate", rule=lambda x, event: (x.shape, x.dtype))

                @op.kernel()
                def _wait(x: Any, event: Any) -> Any:
                    assert event.wait(30)
                    return x

            _Gate._op = op

    def tensor(self, shape: tuple[int, ...]) -> ert.Tensor:
        with ert.config.override(inline_threshold_ns=0):
            return _Gate._op(ert.ones(shape), event=self.event)

    def open(self) -> None:
        self.event.set()


# -- run-time errors -------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_take_out_of_range_fails_on_read(mode: str) -> None:
    unread = ert.stats().unobserved_errors
    with run_mode(mode):
        x = ert.asarray(np.arange(3.0))
        bad = ert.take(x, ert.asarray([0, 5]))  # no error at the call
        assert (bad.shape, bad.dtype) == ((2,), np.dtype("float64"))
        dependent = (bad + 1).sum()  # failures flow to dependents
        assert (dependent.shape, dependent.dtype) == ((), np.dtype("float64"))
        with pytest.raises(ert.KernelError) as info:
            bad.numpy()
        assert "take" in str(info.value)
        assert isinstance(info.value.__cause__, IndexError)
        with pytest.raises(ert.KernelError):
            dependent.numpy()
        with pytest.raises(ert.KernelError):
            np.asarray(bad)
        with pytest.raises(ert.KernelError):
            float(dependent)
        assert "error" in repr(bad)
        assert isinstance(bad.error, ert.KernelError)
        # the good input is untouched
        np.testing.assert_array_equal(x.numpy(), np.arange(3.0))
    assert ert.stats().unobserved_errors == unread  # the failure was read


def test_take_negative_out_of_range_fails_on_read() -> None:
    bad = ert.take(ert.asarray(np.zeros((2, 3))), ert.asarray([-4]), axis=1)
    assert bad.shape == (2, 1)
    with pytest.raises(ert.KernelError):
        bad.numpy()


def test_integer_power_with_negative_exponent_fails_like_numpy() -> None:
    with pytest.raises(ValueError):
        np.int8([2]) ** np.int8([-1])
    try:
        result = ert.asarray(np.int8([2])) ** ert.asarray(np.int8([-1]))
    except ValueError:
        return
    with pytest.raises(ert.KernelError) as info:
        result.numpy()
    assert isinstance(info.value.__cause__, ValueError)


def test_await_gives_the_same_data() -> None:
    import asyncio

    async def main() -> np.ndarray:
        with ert.config.override(inline_threshold_ns=0):
            t = ert.exp(ert.asarray(np.linspace(0, 1, 7))) @ ert.ones((7,))
        return await t

    out = asyncio.run(main())
    assert out.dtype == np.float64
    assert math.isclose(float(out), float(np.exp(np.linspace(0, 1, 7)).sum()), rel_tol=1e-12)
