"""Compiled and eager give the same results: over the op table, and over
randomly generated graphs (hypothesis)."""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import eagerrt as ert
from op_records import RECORDS, OpRecord, numpy_or_type_error


def refuses_to_trace(name: str) -> bool:
    """Records that need an operand's data at the call, by design: ops whose
    result shape depends on data (nonzero, unique_*, repeat() with a tensor of
    counts), and a numpy array on the left of an operator (``a.numpy() + t``)."""
    return name.startswith(("ndarray", "repeat(tensor", "unique_", "nonzero"))


def _data(x: Any) -> Any:
    if isinstance(x, (list, tuple)):
        return [_data(t) for t in x]
    return x.numpy()


def _assert_same(got: Any, want: Any, what: str) -> None:
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), what
        for g, w in zip(got, want, strict=True):
            _assert_same(g, w, what)
        return
    assert (got.shape, got.dtype) == (want.shape, want.dtype), what
    if want.dtype.kind in "fc":
        # Compiled plans may pick other kernels (out forms, fused loops): a few ulps.
        tol = 1e-4 if want.dtype in (np.float32, np.complex64) else 1e-10
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


@pytest.mark.parametrize("rec", RECORDS, ids=lambda rec: rec.name)
def test_compiled_op_matches_eager(rec: OpRecord) -> None:
    compiled = ert.function(lambda *xs: rec.ert_fn(*xs))
    rng = np.random.default_rng(zlib.crc32(rec.name.encode()))
    for dtype in rec.dtypes:
        shapes = rec.shapes[0]
        arrays = [
            gen(rng, shape, d)
            for gen, shape, d in zip(rec.gens, shapes, rec.dtypes_of_args(dtype), strict=True)
        ]
        if numpy_or_type_error(rec.np_fn, *arrays) is None:
            continue  # a dtype the op refuses: test_ops checks the error
        what = f"{rec.name} on {', '.join(f'{a.dtype}{list(a.shape)}' for a in arrays)}"
        tensors = [ert.asarray(a) for a in arrays]
        want = _data(rec.ert_fn(*tensors))
        try:
            got = compiled(*tensors)
        except ert.TracingError:
            assert refuses_to_trace(rec.name), f"{what}: refused to trace"
            continue
        _assert_same(_data(got), want, what)
        _assert_same(_data(compiled(*tensors)), want, f"{what} (second call)")


# -- random graphs ----------------------------------------------------------------------
UNARY = ["negative", "exp", "tanh", "abs", "relu", "sigmoid", "square", "sin"]
BINARY = ["add", "subtract", "multiply", "maximum", "minimum"]
SHAPE = (3, 4)


@st.composite
def programs(draw: Any) -> list[tuple[Any, ...]]:
    """A straight-line program over values 0..n-1: inputs first, then ops."""
    steps: list[tuple[Any, ...]] = []
    n_values = 2  # two inputs
    for _ in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["unary", "binary", "scalar", "matmul", "reduce", "concat"]))
        pick = st.integers(0, n_values - 1)
        if kind == "unary":
            steps.append(("unary", draw(st.sampled_from(UNARY)), draw(pick)))
        elif kind == "binary":
            steps.append(("binary", draw(st.sampled_from(BINARY)), draw(pick), draw(pick)))
        elif kind == "scalar":
            steps.append(("scalar", draw(st.sampled_from(BINARY)), draw(pick),
                          draw(st.sampled_from([0, 1, 2.5, -1.0]))))  # fmt: skip
        elif kind == "matmul":
            steps.append(("matmul", draw(pick)))
        elif kind == "reduce":
            steps.append(("reduce", draw(st.sampled_from(["sum", "max", "mean"])), draw(pick)))
        else:
            steps.append(("concat", draw(pick), draw(pick)))
        n_values += 1
    outputs = draw(st.lists(st.integers(0, n_values - 1), min_size=1, max_size=3))
    steps.append(("return", *outputs))
    return steps


WEIGHT = ert.asarray(np.linspace(-0.5, 0.5, 16).reshape(4, 4))


def run_program(steps: list[tuple[Any, ...]], a: Any, b: Any) -> Any:
    """Every value keeps the shape (3, 4), so any step may read any value."""
    values = [a, b]
    for step in steps[:-1]:
        kind = step[0]
        if kind == "unary":
            values.append(getattr(ert, step[1])(values[step[2]]))
        elif kind == "binary":
            values.append(getattr(ert, step[1])(values[step[2]], values[step[3]]))
        elif kind == "scalar":
            values.append(getattr(ert, step[1])(values[step[2]], step[3]))
        elif kind == "matmul":
            values.append(values[step[1]] @ WEIGHT)
        elif kind == "reduce":
            reduced = getattr(ert, step[1])(values[step[2]], axis=1, keepdims=True)
            values.append(ert.broadcast_to(reduced, SHAPE))
        else:
            joined = ert.concat([values[step[1]], values[step[2]]], axis=1)
            values.append(joined[:, 2:6])
    return tuple(values[i] for i in steps[-1][1:])


@settings(max_examples=60, deadline=None)
@given(programs(), st.integers(0, 2**32 - 1))
def test_random_graphs_compiled_equal_eager(steps: list[tuple[Any, ...]], seed: int) -> None:
    rng = np.random.default_rng(seed)
    a, b = (ert.asarray(rng.uniform(-1, 1, SHAPE)) for _ in range(2))
    compiled = ert.function(lambda a, b: run_program(steps, a, b))
    want = [t.numpy() for t in run_program(steps, a, b)]
    for _ in range(2):  # the second call runs on recycled buffers
        got = [t.numpy() for t in compiled(a, b)]
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
