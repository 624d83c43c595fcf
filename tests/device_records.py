"""The op table run on another device: each record's first numpy-supported case,
computed on ``device`` and compared with numpy (shared by the test device's
tests in CI and the cuda tests on a GPU)."""

from __future__ import annotations

from typing import Any

import numpy as np

import eagerrt as ert
from op_records import RECORDS, OpRecord, numpy_or_type_error, tolerance

__all__ = ["record_failures"]


def _host(got: Any) -> Any:
    if isinstance(got, (list, tuple)):
        return [_host(g) for g in got]
    return got.to("cpu").numpy()


def _compare(got: Any, expected: Any, dtype: np.dtype[Any], factor: float) -> None:
    if isinstance(expected, (list, tuple)):
        for g, e in zip(got, expected, strict=True):
            _compare(g, e, dtype, factor)
        return
    expected = np.asarray(expected)
    rtol, atol = tolerance(expected.dtype if expected.dtype.kind in "fc" else dtype, factor)
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)


def check_record(rec: OpRecord, device: Any, rng: np.random.Generator) -> bool:
    """Run ``rec`` on ``device`` (False if numpy supports none of its cases)."""
    for dtype in rec.dtypes:
        shapes = rec.shapes[0]
        arrays = [
            gen(rng, shape, d)
            for gen, shape, d in zip(rec.gens, shapes, rec.dtypes_of_args(dtype), strict=True)
        ]
        expected = numpy_or_type_error(rec.np_fn, *arrays)
        if expected is None:
            continue
        got = rec.ert_fn(*[ert.asarray(a, device=device) for a in arrays])
        _compare(_host(got), expected, dtype, 4 * rec.tol)
        return True
    return False


def record_failures(device: Any, records: list[OpRecord] | None = None) -> list[str]:
    """Every record that fails on ``device``, with why."""
    failures = []
    rng = np.random.default_rng(0)
    for rec in RECORDS if records is None else records:
        try:
            check_record(rec, device, rng)
        except Exception as exc:
            failures.append(f"{rec.name}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
    return failures
