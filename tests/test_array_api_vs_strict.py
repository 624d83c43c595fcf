"""eagerrt against array_api_strict on the edge cases the Array API 2024.12 standard pins.

Op-record tables in the style of ``op_records.py``: each record is one call made
the same way in both namespaces (``ert`` and ``array_api_strict``), on the same
inputs (built from numpy data, so a record tests its op, not ``asarray``), and
the results must agree: the dtype by name, the shape, and the values
(``np.testing`` on ``np.asarray(strict_result)`` vs ``ert_result.numpy()``,
exact unless the record says otherwise, with NaNs equal and the sign of zeros
checked where the standard fixes it).

Only what the standard pins down is compared. eagerrt follows numpy where the
standard leaves a choice open (e.g. mixed-kind promotion such as int8 + float32,
which strict rejects): those cases are not in the tables. The special-value
table carries the standard's expected value itself (from the "Special cases"
sections of the 2024.12 stubs in data-apis/array-api) and eagerrt must give it;
a separate test checks that strict agrees with the table, so the table cannot
drift from the reference.

Floating-point warnings are ignored here (the suite otherwise turns them into
errors): the standard specifies the values of ``1 / 0``, ``log(0)``, the mean of
nothing..., and says nothing about warnings.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import array_api_strict as xps
import numpy as np
import pytest

import eagerrt as ert

xps.set_array_api_strict_flags(api_version="2024.12")

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

#: The standard's 13 dtypes, in promotion-table order.
DTYPES = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float32",
    "float64",
    "complex64",
    "complex128",
)
INTS = ("int8", "int16", "int32", "int64")
UINTS = ("uint8", "uint16", "uint32", "uint64")
FLOATS = ("float32", "float64")
COMPLEXES = ("complex64", "complex128")
NUMERIC = (*INTS, *UINTS, *FLOATS, *COMPLEXES)

Maker = Callable[[Any, str], Any]
Call = Callable[[Any, Maker], Any]


# -- running one call in both namespaces ----------------------------------------------
def strict_array(values: Any, dtype: str) -> Any:
    return xps.asarray(np.asarray(values, dtype=dtype))


def ert_array(values: Any, dtype: str) -> Any:
    return ert.asarray(np.asarray(values, dtype=dtype))


def run_strict(call: Call) -> Any:
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return call(xps, strict_array)


def dtype_name(dtype: Any) -> str:
    """``float32`` for numpy's, eagerrt's or array_api_strict's float32 dtype."""
    name = getattr(dtype, "name", None)
    return name if isinstance(name, str) else str(dtype).rsplit(".", 1)[-1]


def _check_signed_zeros(actual: np.ndarray, expected: np.ndarray) -> None:
    parts = (
        [(actual.real, expected.real), (actual.imag, expected.imag)]
        if expected.dtype.kind == "c"
        else [(actual, expected)]
    )
    for a, e in parts:
        zeros = e == 0
        np.testing.assert_array_equal(
            np.signbit(a[zeros]), np.signbit(e[zeros]), err_msg="sign of zero differs"
        )


def assert_same(
    actual: Any, expected: Any, *, rtol: float = 0.0, signed_zeros: bool = True
) -> None:
    """eagerrt's result ``actual`` matches strict's ``expected`` (arrays or sequences)."""
    if isinstance(expected, (tuple, list)):
        assert isinstance(actual, (tuple, list)), f"expected a sequence, got {type(actual)}"
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected, strict=True):
            assert_same(a, e, rtol=rtol, signed_zeros=signed_zeros)
        return
    want = np.asarray(expected)
    assert isinstance(actual, ert.Tensor), f"expected a Tensor, got {type(actual).__name__}"
    assert dtype_name(actual.dtype) == want.dtype.name, "result dtype"
    assert tuple(actual.shape) == want.shape, "result shape"
    got = actual.numpy()
    assert got.dtype.name == want.dtype.name, "dtype of the data"
    assert got.shape == want.shape, "shape of the data"
    if rtol:
        np.testing.assert_allclose(got, want, rtol=rtol, atol=0, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want, strict=True)
    if signed_zeros and want.dtype.kind in "fc":
        _check_signed_zeros(got, want)


@dataclass(frozen=True)
class Record:
    """One call, made the same way in both namespaces."""

    id: str
    call: Call
    rtol: float = 0.0
    signed_zeros: bool = True


def check_record(record: Record) -> None:
    expected = run_strict(record.call)
    actual = record.call(ert, ert_array)
    assert_same(actual, expected, rtol=record.rtol, signed_zeros=record.signed_zeros)


def _params(records: Sequence[Record]) -> list[Any]:
    return [pytest.param(r, id=r.id) for r in records]


# -- type promotion between arrays -----------------------------------------------------
# "A conforming implementation of the array API standard must implement the following
# type promotion rules governing the common result type for two array operands during
# an arithmetic operation" (type_promotion.html): the pairs where strict returns a
# result are exactly those tables; strict raises TypeError for every pair the standard
# leaves undefined (mixed kinds, uint64 with signed ints, bool with numbers), and for
# dtypes an op does not take (divide on ints): none of those is compared.
BINARY: dict[str, Callable[[Any, Any, Any], Any]] = {
    "add": lambda xp, a, b: xp.add(a, b),
    "subtract": lambda xp, a, b: xp.subtract(a, b),
    "multiply": lambda xp, a, b: xp.multiply(a, b),
    "divide": lambda xp, a, b: xp.divide(a, b),
    "pow": lambda xp, a, b: xp.pow(a, b),
    "maximum": lambda xp, a, b: xp.maximum(a, b),
    "bitwise_and": lambda xp, a, b: xp.bitwise_and(a, b),
    "logical_or": lambda xp, a, b: xp.logical_or(a, b),
    "equal": lambda xp, a, b: xp.equal(a, b),
    "less": lambda xp, a, b: xp.less(a, b),
    "a + b": lambda xp, a, b: a + b,
    "a * b": lambda xp, a, b: a * b,
    "a / b": lambda xp, a, b: a / b,
    "a & b": lambda xp, a, b: a & b,
    "a == b": lambda xp, a, b: a == b,
}


def _two_arrays(op: str, d1: str, d2: str) -> Call:
    fn = BINARY[op]
    return lambda xp, arr: fn(xp, arr([1, 2], d1), arr([1, 1], d2))


def _defined(call: Call) -> bool:
    try:
        run_strict(call)
    except TypeError:
        return False
    return True


PROMOTION = [
    Record(f"{op}-{d1}-{d2}", _two_arrays(op, d1, d2))
    for op in BINARY
    for d1, d2 in itertools.product(DTYPES, repeat=2)
    if _defined(_two_arrays(op, d1, d2))
]


@pytest.mark.parametrize("record", _params(PROMOTION))
def test_promotion(record: Record) -> None:
    check_record(record)


def test_promotion_table_covers_the_standard() -> None:
    # A sanity check of the generated table against a few of the standard's entries.
    ids = {r.id for r in PROMOTION}
    assert {
        "add-int8-uint8",
        "add-uint32-int64",
        "add-float32-complex128",
        "a & b-bool-bool",
    } <= ids
    assert "add-int8-float32" not in ids  # mixed kinds: unspecified
    assert "add-uint64-int64" not in ids  # no signed type holds both: unspecified
    assert "divide-int8-int8" not in ids  # divide takes floating-point operands
    strict_add = run_strict(_two_arrays("add", "int8", "uint8"))
    assert dtype_name(strict_add.dtype) == "int16"


@pytest.mark.parametrize(
    ("d1", "d2"),
    [
        (a, b)
        for a, b in itertools.product(DTYPES, repeat=2)
        if _defined(lambda xp, arr, a=a, b=b: xp.result_type(getattr(xp, a), getattr(xp, b)))
    ],
)
def test_result_type(d1: str, d2: str) -> None:
    expected = xps.result_type(getattr(xps, d1), getattr(xps, d2))
    assert dtype_name(ert.result_type(getattr(ert, d1), getattr(ert, d2))) == dtype_name(expected)


# -- Python scalars ---------------------------------------------------------------------
# type_promotion.html, "Mixing arrays with Python scalars": a Python bool with a bool
# array; a Python int (within the dtype's bounds) with an integer or floating-point
# array; a Python float with a floating-point array; a Python complex with a complex
# array. "the expected behavior is equivalent to: convert the scalar to zero-dimensional
# array with the same data type as that of the array used in the expression", so the
# result has the array's dtype. 2024.12 extends this to the binary elementwise
# functions ("At least one of x1 or x2 must be an array"). Other pairings (an int with a
# bool array, a complex with a float32 array, an int out of range) are not pinned.
SCALARS: dict[str, tuple[Any, tuple[str, ...]]] = {
    "bool": (True, ("bool",)),
    "int": (2, (*INTS, *UINTS, *FLOATS, *COMPLEXES)),
    "float": (0.5, (*FLOATS, *COMPLEXES)),
    "complex": (1.5 - 2j, COMPLEXES),
}
SCALAR_OPS_NUMERIC: dict[str, Callable[[Any, Any, Any], Any]] = {
    "x + s": lambda xp, x, s: x + s,
    "s + x": lambda xp, x, s: s + x,
    "x * s": lambda xp, x, s: x * s,
    "s - x": lambda xp, x, s: s - x,
    "x == s": lambda xp, x, s: x == s,
    "add(x, s)": lambda xp, x, s: xp.add(x, s),
    "multiply(s, x)": lambda xp, x, s: xp.multiply(s, x),
}
SCALAR_OPS_FLOAT: dict[str, Callable[[Any, Any, Any], Any]] = {
    "x / s": lambda xp, x, s: x / s,
    "s / x": lambda xp, x, s: s / x,
    "divide(x, s)": lambda xp, x, s: xp.divide(x, s),
}
SCALAR_OPS_BOOL: dict[str, Callable[[Any, Any, Any], Any]] = {
    "x & s": lambda xp, x, s: x & s,
    "s | x": lambda xp, x, s: s | x,
    "x == s": lambda xp, x, s: x == s,
    "logical_and(x, s)": lambda xp, x, s: xp.logical_and(x, s),
}


def _scalar_records() -> list[Record]:
    records = []
    for kind, (scalar, dtypes) in SCALARS.items():
        for dtype in dtypes:
            if dtype == "bool":
                ops = SCALAR_OPS_BOOL
            elif dtype in FLOATS + COMPLEXES:
                ops = {**SCALAR_OPS_NUMERIC, **SCALAR_OPS_FLOAT}
            else:
                ops = SCALAR_OPS_NUMERIC
            values = [True, False] if dtype == "bool" else [1, 2]
            for name, fn in ops.items():
                records.append(
                    Record(
                        f"{name}-{dtype}-{kind}",
                        lambda xp, arr, fn=fn, v=values, d=dtype, s=scalar: fn(xp, arr(v, d), s),
                    )
                )
    return records


SCALAR_RECORDS = _scalar_records()


@pytest.mark.parametrize("record", _params(SCALAR_RECORDS))
def test_python_scalar_operand(record: Record) -> None:
    check_record(record)


# -- special values -----------------------------------------------------------------------
inf, nan = math.inf, math.nan
PZ, NZ = 0.0, -0.0
PI = math.pi


@dataclass(frozen=True)
class Special:
    op: str
    args: tuple[float, ...]
    expected: float
    #: False where the standard gives a zero without fixing its sign.
    signed: bool = True

    @property
    def id(self) -> str:
        return f"{self.op}({', '.join(map(repr, self.args))})"


def _cases(op: str, rows: Sequence[tuple[float, ...]], signed: bool = True) -> list[Special]:
    return [Special(op, row[:-1], row[-1], signed) for row in rows]


# Each row: inputs..., the standard's result (elementwise_functions.py, "Special cases").
SPECIAL = [
    *_cases(
        "divide",
        [
            (nan, 1.0, nan),
            (1.0, nan, nan),
            (inf, inf, nan),
            (inf, -inf, nan),
            (-inf, inf, nan),
            (PZ, PZ, nan),
            (NZ, PZ, nan),
            (PZ, NZ, nan),
            (PZ, 2.0, PZ),
            (PZ, -2.0, NZ),
            (NZ, 2.0, NZ),
            (NZ, -2.0, PZ),
            (2.0, PZ, inf),
            (2.0, NZ, -inf),
            (-2.0, PZ, -inf),
            (-2.0, NZ, inf),
            (inf, 2.0, inf),
            (inf, -2.0, -inf),
            (-inf, 2.0, -inf),
            (-inf, -2.0, inf),
            (2.0, inf, PZ),
            (2.0, -inf, NZ),
            (-2.0, inf, NZ),
            (-2.0, -inf, PZ),
        ],
    ),
    *_cases(
        "pow",
        [
            (2.0, nan, nan),
            (nan, PZ, 1.0),
            (nan, NZ, 1.0),
            (nan, 2.0, nan),
            (1.0, nan, 1.0),
            (1.0, inf, 1.0),
            (2.0, inf, inf),
            (-2.0, inf, inf),
            (2.0, -inf, PZ),
            (-1.0, inf, 1.0),
            (-1.0, -inf, 1.0),
            (0.5, inf, PZ),
            (-0.5, inf, PZ),
            (0.5, -inf, inf),
            (inf, 2.0, inf),
            (inf, -2.0, PZ),
            (-inf, 3.0, -inf),
            (-inf, 2.0, inf),
            (-inf, -3.0, NZ),
            (-inf, -2.0, PZ),
            (PZ, 2.0, PZ),
            (PZ, -2.0, inf),
            (NZ, 3.0, NZ),
            (NZ, 2.0, PZ),
            (NZ, -3.0, -inf),
            (NZ, -2.0, inf),
            (-2.0, 0.5, nan),
        ],
    ),
    *_cases(
        "remainder",
        [
            (nan, 1.0, nan),
            (1.0, nan, nan),
            (inf, inf, nan),
            (inf, 2.0, nan),
            (-inf, 2.0, nan),
            (inf, -2.0, nan),
            (PZ, 2.0, PZ),
            (NZ, 2.0, PZ),
            (PZ, -2.0, NZ),
            (NZ, -2.0, NZ),
            (2.0, PZ, nan),
            (2.0, NZ, nan),
            (-2.0, PZ, nan),
            (3.0, inf, 3.0),
            (3.0, -inf, -inf),
            (-3.0, inf, inf),
            (-3.0, -inf, -3.0),
            # "In the remaining cases, the result must match that of the Python % operator."
            (5.0, 3.0, 2.0),
            (-5.0, 3.0, 1.0),
            (5.0, -3.0, -1.0),
            (-5.0, -3.0, -2.0),
        ],
    ),
    *_cases(
        "floor_divide",
        [
            (nan, 1.0, nan),
            (1.0, nan, nan),
            (inf, inf, nan),
            (inf, -inf, nan),
            (PZ, PZ, nan),
            (NZ, NZ, nan),
            (PZ, 2.0, PZ),
            (PZ, -2.0, NZ),
            (NZ, 2.0, NZ),
            (NZ, -2.0, PZ),
            (2.0, PZ, inf),
            (2.0, NZ, -inf),
            (-2.0, PZ, -inf),
            (-2.0, NZ, inf),
            (7.0, 2.0, 3.0),
            (-7.0, 2.0, -4.0),
        ],
    ),
    *_cases("sqrt", [(nan, nan), (-1.0, nan), (-inf, nan), (PZ, PZ), (NZ, NZ), (inf, inf)]),
    *_cases("log", [(nan, nan), (-1.0, nan), (PZ, -inf), (NZ, -inf), (1.0, PZ), (inf, inf)]),
    *_cases("exp", [(nan, nan), (PZ, 1.0), (NZ, 1.0), (inf, inf), (-inf, PZ)]),
    # sign: "If x_i is either -0 or +0, the result is 0" (the sign of that zero is open).
    *_cases("sign", [(PZ, PZ), (NZ, PZ)], signed=False),
    *_cases("sign", [(nan, nan), (-3.0, -1.0), (3.0, 1.0), (inf, 1.0), (-inf, -1.0)]),
    *_cases(
        "round",
        [
            (nan, nan),
            (inf, inf),
            (-inf, -inf),
            (PZ, PZ),
            (NZ, NZ),
            (1.5, 2.0),
            (2.5, 2.0),
            (-2.5, -2.0),
            (3.7, 4.0),
        ],
    ),
    # "If two integers are equally close to x_i, the result is the even integer closest
    # to x_i": 0 for +-0.5, with no sign fixed.
    *_cases("round", [(0.5, PZ), (-0.5, PZ)], signed=False),
    *_cases(
        "atan2",
        [
            (nan, 1.0, nan),
            (1.0, nan, nan),
            (2.0, PZ, PI / 2),
            (2.0, NZ, PI / 2),
            (PZ, 2.0, PZ),
            (PZ, PZ, PZ),
            (PZ, NZ, PI),
            (PZ, -2.0, PI),
            (NZ, 2.0, NZ),
            (NZ, PZ, NZ),
            (NZ, NZ, -PI),
            (NZ, -2.0, -PI),
            (-2.0, PZ, -PI / 2),
            (-2.0, NZ, -PI / 2),
            (2.0, inf, PZ),
            (2.0, -inf, PI),
            (-2.0, inf, NZ),
            (-2.0, -inf, -PI),
            (inf, 2.0, PI / 2),
            (-inf, 2.0, -PI / 2),
            (inf, inf, PI / 4),
            (inf, -inf, 3 * PI / 4),
            (-inf, inf, -PI / 4),
            (-inf, -inf, -3 * PI / 4),
        ],
    ),
    *_cases(
        "hypot",
        [
            (inf, nan, inf),
            (nan, -inf, inf),
            (nan, 1.0, nan),
            (1.0, nan, nan),
            (PZ, NZ, PZ),
            (NZ, NZ, PZ),
            (3.0, 4.0, 5.0),
            (-3.0, -4.0, 5.0),
        ],
    ),
    *_cases("maximum", [(nan, 1.0, nan), (1.0, nan, nan), (-inf, 2.0, 2.0)]),
    *_cases("minimum", [(nan, 1.0, nan), (1.0, nan, nan), (inf, 2.0, 2.0)]),
    *_cases(
        "add",
        [(inf, -inf, nan), (-inf, inf, nan), (NZ, NZ, NZ), (PZ, NZ, PZ), (inf, 2.0, inf)],
    ),
    *_cases(
        "multiply",
        [(inf, PZ, nan), (NZ, inf, nan), (inf, -2.0, -inf), (NZ, 2.0, NZ), (NZ, NZ, PZ)],
    ),
]


def _special_call(case: Special, dtype: str) -> Call:
    return lambda xp, arr: getattr(xp, case.op)(*(arr(a, dtype) for a in case.args))


def _assert_special(result: Any, case: Special, dtype: str) -> None:
    want = np.asarray(case.expected, dtype=dtype)
    assert dtype_name(result.dtype) == dtype, "result dtype"
    got = np.asarray(result.numpy() if isinstance(result, ert.Tensor) else result)
    assert got.shape == (), "result shape"
    np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == "float32" else 1e-15, atol=0)
    if case.signed and case.expected == 0:
        assert np.signbit(got) == np.signbit(want), f"expected {case.expected!r}, got {got!r}"


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in SPECIAL])
def test_special_value(case: Special, dtype: str) -> None:
    _assert_special(_special_call(case, dtype)(ert, ert_array), case, dtype)


def test_special_value_table_agrees_with_strict() -> None:
    # array_api_strict (numpy underneath) gives every special value in the table:
    # a wrong row in the table would show here, not as a bogus eagerrt failure.
    wrong = []
    for case, dtype in itertools.product(SPECIAL, FLOATS):
        try:
            _assert_special(run_strict(_special_call(case, dtype)), case, dtype)
        except AssertionError:
            wrong.append(f"{case.id} {dtype}")
    assert not wrong, wrong


# -- fixed-width integers at their bounds --------------------------------------------------
# The 2024.12 standard does not define the result of integer arithmetic that leaves the
# dtype's range (the Data Types page gives only the ranges; ``abs`` notes "the absolute
# value of the minimum representable integer is implementation-dependent"; Python
# scalars must be "within the bounds of the given data type"), so wrap-around is not
# compared. What it does pin: results keep the fixed-width dtype and are exact at the
# bounds (no trip through float64), floor_divide floors, remainder takes the divisor's
# sign, bitwise ops act on the two's-complement bits, and integer sums/products
# accumulate in the default integer dtype (so they do not wrap at the input's width).
I64_MAX, I64_MIN, U64_MAX = 2**63 - 1, -(2**63), 2**64 - 1
INTEGER_RECORDS = [
    Record("add-int64-max", lambda xp, a: xp.add(a([I64_MAX], "int64"), a([0], "int64"))),
    Record("subtract-int64-min", lambda xp, a: xp.subtract(a([I64_MIN], "int64"), a([0], "int64"))),
    Record("multiply-uint64-max", lambda xp, a: xp.multiply(a([U64_MAX], "uint64"), 1)),
    Record("add-uint64-max-minus-1", lambda xp, a: a([U64_MAX - 1], "uint64") + 1),
    Record("negative-int8", lambda xp, a: xp.negative(a([127, -127, 0], "int8"))),
    Record("abs-int16", lambda xp, a: xp.abs(a([-32767, 32767], "int16"))),
    Record(
        "floor_divide-int8",
        lambda xp, a: xp.floor_divide(a([-7, 7, -7, 7], "int8"), a([2, -2, -2, 2], "int8")),
    ),
    Record(
        "remainder-int8",
        lambda xp, a: xp.remainder(a([-7, 7, -7, 7], "int8"), a([2, -2, -2, 2], "int8")),
    ),
    Record("bitwise_invert-int8", lambda xp, a: xp.bitwise_invert(a([0, 127, -128], "int8"))),
    Record("bitwise_invert-uint8", lambda xp, a: xp.bitwise_invert(a([0, 255], "uint8"))),
    Record("bitwise_invert-uint64", lambda xp, a: ~a([0, U64_MAX], "uint64")),
    Record("bitwise_xor-uint64", lambda xp, a: xp.bitwise_xor(a([U64_MAX], "uint64"), 1)),
    Record("bitwise_and-int64-min", lambda xp, a: a([I64_MIN], "int64") & -1),
    Record(
        "bitwise_left_shift-uint8",
        lambda xp, a: xp.bitwise_left_shift(a([1, 1], "uint8"), a([0, 7], "uint8")),
    ),
    Record("sum-int8-no-wrap", lambda xp, a: xp.sum(a([127, 127, 127], "int8"))),
    Record("sum-uint8-no-wrap", lambda xp, a: xp.sum(a([255, 255], "uint8"))),
    Record("prod-int8-no-wrap", lambda xp, a: xp.prod(a([100, -100], "int8"))),
    Record("cumulative_sum-int8-no-wrap", lambda xp, a: xp.cumulative_sum(a([127, 127], "int8"))),
]


@pytest.mark.parametrize("record", _params(INTEGER_RECORDS))
def test_fixed_width_integers(record: Record) -> None:
    check_record(record)


@pytest.mark.parametrize("dtype", (*INTS, *UINTS))
def test_iinfo(dtype: str) -> None:
    got, want = ert.iinfo(getattr(ert, dtype)), xps.iinfo(getattr(xps, dtype))
    assert (got.bits, got.min, got.max) == (want.bits, want.min, want.max)
    assert all(type(v) is int for v in (got.bits, got.min, got.max))  # the standard's types
    assert got.dtype == getattr(ert, dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_finfo(dtype: str) -> None:
    got, want = ert.finfo(getattr(ert, dtype)), xps.finfo(getattr(xps, dtype))
    for field in ("bits", "eps", "max", "min", "smallest_normal"):
        assert float(getattr(got, field)) == float(getattr(want, field)), field
    # The standard: bits an int, the limits Python floats (numpy gives numpy scalars).
    assert type(got.bits) is int
    assert all(type(getattr(got, f)) is float for f in ("eps", "max", "min", "smallest_normal"))
    assert got.dtype == getattr(ert, dtype)


# -- empty and 0-d arrays --------------------------------------------------------------------
def _r(name: str, call: Call, **kw: Any) -> Record:
    return Record(name, call, **kw)


EMPTY_RECORDS = [
    # elementwise: broadcasting keeps zero-size dimensions; 0-d stays 0-d
    _r(
        "add-(2,0)+(2,0)",
        lambda xp, a: xp.add(a(np.zeros((2, 0)), "float32"), a(np.zeros((2, 0)), "float32")),
    ),
    _r("add-(2,0)+(0,)", lambda xp, a: a(np.zeros((2, 0)), "int16") + a([], "int16")),
    _r("add-(2,0)+(1,)", lambda xp, a: a(np.zeros((2, 0)), "float64") + a([1], "float64")),
    _r("add-()+(3,)", lambda xp, a: a(2.0, "float64") + a([1, 2, 3], "float64")),
    _r("add-()+()", lambda xp, a: xp.add(a(2, "int16"), a(3, "int16"))),
    _r("multiply-(0,)-scalar", lambda xp, a: a([], "float32") * 2.0),
    _r("sqrt-(0,)", lambda xp, a: xp.sqrt(a([], "float32"))),
    _r("exp-()", lambda xp, a: xp.exp(a(0.0, "float64"))),
    _r("negative-()-int8", lambda xp, a: -a(5, "int8")),
    _r("abs-()-complex64", lambda xp, a: xp.abs(a(3 + 4j, "complex64"))),
    _r("equal-(2,0)", lambda xp, a: a(np.zeros((2, 0)), "int32") == a(np.zeros((2, 0)), "int32")),
    _r("less-()", lambda xp, a: xp.less(a(1.0, "float32"), a(2.0, "float32"))),
    _r("where-(0,)", lambda xp, a: xp.where(a([], "bool"), a([], "float64"), a([], "float64"))),
    _r(
        "where-()-broadcast",
        lambda xp, a: xp.where(a(True, "bool"), a([1, 2, 3], "int32"), a(0, "int32")),
    ),
    _r("clip-()", lambda xp, a: xp.clip(a(5.0, "float64"), 0.0, 1.0)),
    _r("isnan-(2,0)", lambda xp, a: xp.isnan(a(np.zeros((2, 0)), "float64"))),
    # reductions: "If the number of elements over which to compute the sum is zero, the
    # sum must be 0"; "... the product must be 1"; mean: "must be NaN"; var/std: "If
    # N - correction is less than or equal to 0, the variance must be NaN"; all of
    # nothing is True, any of nothing is False.
    _r("sum-(0,)-float32", lambda xp, a: xp.sum(a([], "float32"))),
    _r("sum-(0,)-int8", lambda xp, a: xp.sum(a([], "int8"))),
    _r("sum-(0,)-uint8", lambda xp, a: xp.sum(a([], "uint8"))),
    _r("sum-(0,)-complex64", lambda xp, a: xp.sum(a([], "complex64"))),
    _r("prod-(0,)-float64", lambda xp, a: xp.prod(a([], "float64"))),
    _r("prod-(0,)-int32", lambda xp, a: xp.prod(a([], "int32"))),
    _r("sum-(2,0)-axis1", lambda xp, a: xp.sum(a(np.zeros((2, 0)), "float32"), axis=1)),
    _r("sum-(2,0)-axis0", lambda xp, a: xp.sum(a(np.zeros((2, 0)), "float32"), axis=0)),
    _r("prod-(2,0)-axis1", lambda xp, a: xp.prod(a(np.zeros((2, 0)), "int16"), axis=1)),
    _r(
        "sum-(2,0)-axis1-keepdims",
        lambda xp, a: xp.sum(a(np.zeros((2, 0)), "float64"), axis=1, keepdims=True),
    ),
    # max/min of nothing are implementation-defined ("may choose to raise an error,
    # return a sentinel value ..."), but reducing a non-empty axis of an empty array is not.
    _r("max-(2,0)-axis0", lambda xp, a: xp.max(a(np.zeros((2, 0)), "float32"), axis=0)),
    _r("min-(0,3)-axis1", lambda xp, a: xp.min(a(np.zeros((0, 3)), "int8"), axis=1)),
    _r("mean-(0,)", lambda xp, a: xp.mean(a([], "float64"))),
    _r("mean-(2,0)-axis1", lambda xp, a: xp.mean(a(np.zeros((2, 0)), "float32"), axis=1)),
    _r("var-(0,)", lambda xp, a: xp.var(a([], "float64"))),
    _r("std-(1,)-correction1", lambda xp, a: xp.std(a([3.0], "float64"), correction=1)),
    _r("all-(0,)", lambda xp, a: xp.all(a([], "bool"))),
    _r("any-(0,)", lambda xp, a: xp.any(a([], "bool"))),
    _r("all-(2,0)-axis1", lambda xp, a: xp.all(a(np.zeros((2, 0)), "bool"), axis=1)),
    _r("any-(2,0)-axis1", lambda xp, a: xp.any(a(np.zeros((2, 0)), "bool"), axis=1)),
    _r("count_nonzero-(0,)", lambda xp, a: xp.count_nonzero(a([], "float64"))),
    _r("cumulative_sum-(0,)", lambda xp, a: xp.cumulative_sum(a([], "float32"))),
    _r(
        "cumulative_sum-(0,)-include_initial",
        lambda xp, a: xp.cumulative_sum(a([], "int8"), include_initial=True),
    ),
    _r("sum-()", lambda xp, a: xp.sum(a(2.5, "float32"))),
    _r("max-()", lambda xp, a: xp.max(a(-1, "int16"))),
    _r(
        "matmul-(2,0)@(0,3)",
        lambda xp, a: a(np.zeros((2, 0)), "float64") @ a(np.zeros((0, 3)), "float64"),
    ),
    _r("vecdot-(0,)", lambda xp, a: xp.vecdot(a([], "float32"), a([], "float32"))),
    # manipulation
    _r("concat-(0,)+(2,)", lambda xp, a: xp.concat([a([], "float32"), a([1, 2], "float32")])),
    _r(
        "concat-(2,0)+(2,3)-axis1",
        lambda xp, a: xp.concat((a(np.zeros((2, 0)), "int8"), a(np.ones((2, 3)), "int8")), axis=1),
    ),
    _r("concat-promotes-int8-int16", lambda xp, a: xp.concat([a([1], "int8"), a([300], "int16")])),
    _r(
        "concat-axis-None",
        lambda xp, a: xp.concat([a(np.zeros((2, 0)), "float64"), a([[1.0]], "float64")], axis=None),
    ),
    _r("stack-0d", lambda xp, a: xp.stack([a(1, "uint8"), a(2, "uint8")])),
    _r("stack-(0,)", lambda xp, a: xp.stack([a([], "float64"), a([], "float64")], axis=1)),
    _r(
        "stack-promotes-float32-float64",
        lambda xp, a: xp.stack([a([1], "float32"), a([2], "float64")]),
    ),
    _r("reshape-(2,0)-(0,5)", lambda xp, a: xp.reshape(a(np.zeros((2, 0)), "int32"), (0, 5))),
    _r("reshape-()-(1,1)", lambda xp, a: xp.reshape(a(7, "int32"), (1, 1))),
    _r("reshape-(1,1)-()", lambda xp, a: xp.reshape(a([[7]], "int32"), ())),
    _r("expand_dims-()", lambda xp, a: xp.expand_dims(a(1.0, "float32"), axis=0)),
    _r(
        "expand_dims-(2,0)-axis-1",
        lambda xp, a: xp.expand_dims(a(np.zeros((2, 0)), "float32"), axis=-1),
    ),
    _r("squeeze-(1,0)", lambda xp, a: xp.squeeze(a(np.zeros((1, 0)), "float32"), axis=0)),
    _r(
        "permute_dims-(2,0,3)",
        lambda xp, a: xp.permute_dims(a(np.zeros((2, 0, 3)), "int8"), (1, 2, 0)),
    ),
    _r("matrix_transpose-(2,0)", lambda xp, a: xp.matrix_transpose(a(np.zeros((2, 0)), "float64"))),
    _r("broadcast_to-()", lambda xp, a: xp.broadcast_to(a(3, "int16"), (2, 3))),
    _r("broadcast_to-(0,)", lambda xp, a: xp.broadcast_to(a([], "int16"), (2, 0))),
    _r(
        "broadcast_arrays-()-(2,0)",
        lambda xp, a: xp.broadcast_arrays(a(1.0, "float32"), a(np.zeros((2, 0)), "float32")),
    ),
    _r("flip-(0,)", lambda xp, a: xp.flip(a([], "float32"))),
    _r("flip-()", lambda xp, a: xp.flip(a(4, "int64"))),
    _r("roll-(0,)", lambda xp, a: xp.roll(a([], "float64"), 1)),
    _r("moveaxis-(2,0,3)", lambda xp, a: xp.moveaxis(a(np.zeros((2, 0, 3)), "uint8"), 0, -1)),
    _r("tile-(0,)", lambda xp, a: xp.tile(a([], "int32"), (2,))),
    _r("repeat-(0,)", lambda xp, a: xp.repeat(a([], "int32"), 3)),
    _r("unstack-(2,0)", lambda xp, a: xp.unstack(a(np.zeros((2, 0)), "float32"))),
    _r("sort-(0,)", lambda xp, a: xp.sort(a([], "float32"))),
    _r("argsort-(0,)", lambda xp, a: xp.argsort(a([], "float32"))),
    _r(
        "take-empty-indices",
        lambda xp, a: xp.take(a([1.0, 2.0], "float64"), a([], "int64"), axis=0),
    ),
    _r("getitem-()-ellipsis", lambda xp, a: a(5, "int8")[...]),
    _r("getitem-(2,0)-row", lambda xp, a: a(np.zeros((2, 0)), "float32")[1, :]),
    _r("getitem-empty-slice", lambda xp, a: a([1, 2, 3], "int16")[2:1]),
    _r("getitem-newaxis", lambda xp, a: a(1.5, "float64")[None]),
]


@pytest.mark.parametrize("record", _params(EMPTY_RECORDS))
def test_empty_and_zero_d(record: Record) -> None:
    check_record(record)


# -- result dtypes of reductions ------------------------------------------------------------
# sum/prod/cumulative_sum with dtype=None: "if x has a signed integer data type (e.g.,
# int16), the returned array must have the default integer data type"; "if x has an
# unsigned integer data type (e.g., uint16), the returned array must have an unsigned
# integer data type having the same number of bits as the default integer data type";
# "if x has a real-valued floating-point data type, the returned array must have the
# same data type as x" (likewise complex). eagerrt's and strict's default integer dtype
# are both int64 (test_array_api_names checks eagerrt's default_dtypes). max/min keep
# the input dtype. mean/var/std keep a floating dtype; for integer input mean says x
# "should have a floating-point data type", so whether ints raise is left open and not
# compared. argmax/argmin return the default array index dtype.
def _reduction_records() -> list[Record]:
    records = []
    values = [[1, 2, 3], [4, 5, 6]]
    for name in ("sum", "prod", "cumulative_sum", "max", "min"):
        for dtype in NUMERIC:
            if name in ("max", "min") and dtype in COMPLEXES:
                continue  # max/min take real-valued input
            # cumulative_sum needs an axis for 2-d input; the others reduce everything.
            kw = {"axis": 1} if name == "cumulative_sum" else {}
            records.append(
                Record(
                    f"{name}-{dtype}",
                    lambda xp, a, n=name, d=dtype, kw=kw: getattr(xp, n)(a(values, d), **kw),
                )
            )
    for name in ("mean", "var", "std"):
        for dtype in FLOATS + (COMPLEXES if name == "mean" else ()):
            records.append(
                Record(
                    f"{name}-{dtype}",
                    lambda xp, a, n=name, d=dtype: getattr(xp, n)(a(values, d), axis=0),
                    rtol=1e-6,
                )
            )
    for name in ("argmax", "argmin"):
        for dtype in ("int8", "uint16", "float32"):
            records.append(
                Record(
                    f"{name}-{dtype}",
                    lambda xp, a, n=name, d=dtype: getattr(xp, n)(a(values, d), axis=1),
                )
            )
    records += [
        Record("sum-int8-dtype-int8", lambda xp, a: xp.sum(a([1, 2], "int8"), dtype=xp.int8)),
        Record(
            "sum-float32-dtype-float64",
            lambda xp, a: xp.sum(a([1, 2], "float32"), dtype=xp.float64),
        ),
        Record(
            "prod-uint8-dtype-uint16", lambda xp, a: xp.prod(a([3, 4], "uint8"), dtype=xp.uint16)
        ),
        Record(
            "sum-int16-axis0-keepdims",
            lambda xp, a: xp.sum(a(values, "int16"), axis=0, keepdims=True),
        ),
        Record(
            "mean-keepdims", lambda xp, a: xp.mean(a(values, "float32"), axis=(0, 1), keepdims=True)
        ),
    ]
    return records


REDUCTION_RECORDS = _reduction_records()


@pytest.mark.parametrize("record", _params(REDUCTION_RECORDS))
def test_reduction_dtype(record: Record) -> None:
    check_record(record)


def test_record_ids_are_unique() -> None:
    for records in (PROMOTION, SCALAR_RECORDS, INTEGER_RECORDS, EMPTY_RECORDS, REDUCTION_RECORDS):
        ids = [r.id for r in records]
        assert len(ids) == len(set(ids))
    special_ids = [c.id for c in SPECIAL]
    assert len(special_ids) == len(set(special_ids))


def test_comparison_helper_catches_mismatches() -> None:
    # assert_same must fail on a wrong dtype, shape, value or sign of zero.
    strict_value = xps.asarray(np.asarray([0.0, 1.0], dtype="float32"))
    assert_same(ert.asarray(np.asarray([0.0, 1.0], dtype="float32")), strict_value)
    for wrong in (
        np.asarray([0.0, 1.0], dtype="float64"),
        np.asarray([0.0, 2.0], dtype="float32"),
        np.asarray([-0.0, 1.0], dtype="float32"),
        np.asarray([[0.0, 1.0]], dtype="float32"),
    ):
        with pytest.raises(AssertionError):
            assert_same(ert.asarray(wrong), strict_value)
