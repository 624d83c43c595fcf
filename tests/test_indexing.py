"""Indexing with integer arrays and boolean masks, against numpy.

Integer-array indexes gather asynchronously (a bad index fails on read); a
boolean mask decides the result's shape, so indexing waits for the mask, and
only for it, at the call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import eagerrt as ert
from conftest import Gate

X = np.arange(2 * 3 * 4).reshape(2, 3, 4)


def _mask(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random(shape) < 0.5


INDEXES: list[tuple[str, Any]] = [
    ("int array", (np.array([1, 0, 1]),)),
    ("negative ints", (np.array([-1, 0]),)),
    ("list of ints", ([1, 0],)),
    ("two broadcast arrays", (slice(None), np.array([[0], [2]]), np.array([1, 3]))),
    ("array then slice", (np.array([0, 1]), slice(1, 3))),
    ("separated arrays", (np.array([0, 1]), slice(None), np.array([3, 2]))),
    ("int and array", (0, [2, 1])),
    ("new axis and array", (None, np.array([1]), Ellipsis)),
    ("empty array", (np.array([], dtype=np.int64),)),
    ("2-d int array", (np.array([[0, 1], [1, 0]]),)),
    ("full mask", (_mask((2, 3, 4), 0),)),
    ("leading mask", (_mask((2, 3), 1),)),
    ("mask after slice", (slice(None), _mask((3,), 2))),
    ("trailing mask", (Ellipsis, _mask((4,), 3))),
    ("all-false mask", (np.zeros((2,), dtype=bool),)),
    ("0-d true mask", (np.array(True),)),
    ("0-d false mask", (np.array(False),)),
    ("mask and int array", (np.array([True, False]), slice(None), np.array([0, 3]))),
]


@pytest.mark.parametrize(("name", "index"), INDEXES, ids=[n for n, _ in INDEXES])
@pytest.mark.parametrize("threaded", [False, True], ids=["inline", "threaded"])
def test_getitem_matches_numpy(name: str, index: Any, threaded: bool) -> None:
    t = ert.asarray(X)
    as_tensors = tuple(ert.asarray(p) if isinstance(p, np.ndarray) else p for p in index)
    expected = X[index]
    with ert.config.override(inline_threshold_ns=0 if threaded else 10**9):
        got = t[as_tensors]
    assert got.shape == expected.shape  # known at the call
    np.testing.assert_array_equal(got.numpy(timeout=10), expected)


@pytest.mark.parametrize(("name", "index"), INDEXES, ids=[n for n, _ in INDEXES])
def test_setitem_matches_numpy(name: str, index: Any) -> None:
    t = ert.asarray(X.copy())
    as_tensors = tuple(ert.asarray(p) if isinstance(p, np.ndarray) else p for p in index)
    expected = X.copy()
    expected[index] = -7
    t[as_tensors] = -7
    np.testing.assert_array_equal(t.numpy(timeout=10), expected)


def test_array_index_waits_for_nothing(gate: Callable[[], Gate]) -> None:
    g = gate()
    x = g()  # pending data
    idx = g(np.array([2, 0]))  # pending index
    out = x[idx]
    assert out.shape == (2,) and not out.is_ready()
    g.open()
    assert out.numpy(timeout=10).tolist() == [2.0, 0.0]


def test_mask_index_waits_only_for_the_mask(gate: Callable[[], Gate]) -> None:
    g = gate()
    x = g()  # pending data: [0, 1, 2]
    out = x[ert.asarray([True, False, True])]  # ready mask: no wait at all
    assert out.shape == (2,) and not out.is_ready()
    g.open()
    assert out.numpy(timeout=10).tolist() == [0.0, 2.0]


def test_mask_that_is_pending_is_waited_for() -> None:
    with ert.config.override(inline_threshold_ns=0):
        x = ert.arange(6.0)
        mask = x > 2.5  # computed on a worker
        out = x[mask]
    assert out.shape == (3,)
    assert out.numpy(timeout=10).tolist() == [3.0, 4.0, 5.0]


def test_out_of_range_array_index_fails_on_read(clean_errors: None) -> None:
    out = ert.arange(3)[ert.asarray([0, 5])]
    assert out.shape == (2,)
    with pytest.raises(ert.KernelError, match="out of bounds"):
        out.numpy(timeout=10)


@pytest.mark.parametrize(
    ("index", "error"),
    [
        (ert.asarray([0.5]), ert.DTypeError),
        ("a", ert.DTypeError),
        (1.5, ert.DTypeError),
        (ert.asarray([True, False]), IndexError),  # the mask's shape is checked at the call
        ((0, 0, 0, 0), IndexError),  # too many indices
    ],
)
def test_bad_indexes_fail_at_the_call(index: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        ert.arange(12).reshape((3, 4))[index]


def test_take_along_axis_with_argsort() -> None:
    x = np.array([[3.0, 1.0, 2.0], [0.0, 5.0, 4.0]])
    t = ert.asarray(x)
    for axis in (0, 1, -1):
        idx = np.argsort(x, axis=axis)
        got = ert.take_along_axis(t, ert.asarray(idx), axis=axis)
        np.testing.assert_array_equal(got.numpy(), np.take_along_axis(x, idx, axis=axis))
    with pytest.raises(ert.ShapeError):
        ert.take_along_axis(t, ert.asarray([0, 1]), axis=0)  # rank differs
    with pytest.raises(TypeError):
        ert.take_along_axis(t, ert.asarray(np.zeros((2, 3), dtype=np.int64)), 1)  # type: ignore[misc]
