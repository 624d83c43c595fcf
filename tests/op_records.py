"""The op table: one record per op (or op variant), checked against numpy.

After JAX's ``lax_numpy_test`` op records: each :class:`OpRecord` names an
eagerrt call, the numpy (or hand-written numpy) reference it must match, its
arity, the dtypes to run it in, the sets of input shapes, one input generator
per argument and a tolerance factor. ``test_ops.py`` runs every record, in
every dtype, in three scheduling modes, and checks both the metadata known at
call time and the data against numpy.

Records run in dtypes numpy does not support for the op too: there the test
expects eagerrt to raise :class:`eagerrt.DTypeError` at the call, as numpy
raises ``TypeError``.
"""

from __future__ import annotations

import contextlib
import math
import operator
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import eagerrt as ert

__all__ = [
    "ALL",
    "MODES",
    "as_input",
    "check_result",
    "expect_type_error",
    "numpy_or_type_error",
    "result_data",
    "run_mode",
    "ALL_REAL",
    "BINARY_SHAPES",
    "CREATION_CASES",
    "FLOATS",
    "INTS",
    "RECORDS",
    "UNARY_SHAPES",
    "CreationCase",
    "OpRecord",
    "rand_default",
    "rand_nonzero",
    "rand_positive",
    "rand_small",
    "tolerance",
]

Shape = tuple[int, ...]
Gen = Callable[[np.random.Generator, Shape, np.dtype[Any]], np.ndarray]

BOOL = np.dtype(np.bool_)
INT8 = np.dtype(np.int8)
INT32 = np.dtype(np.int32)
INT64 = np.dtype(np.int64)
UINT8 = np.dtype(np.uint8)
FLOAT32 = np.dtype(np.float32)
FLOAT64 = np.dtype(np.float64)
COMPLEX128 = np.dtype(np.complex128)

INTS = (INT8, INT32, INT64, UINT8)
FLOATS = (FLOAT32, FLOAT64)
ALL_REAL = (BOOL, *INTS, *FLOATS)
ALL = (*ALL_REAL, COMPLEX128)


# -- input generators ----------------------------------------------------------------
# Every generator keeps its values where numpy computes without a floating-point
# warning (the suite turns warnings into errors, inside kernels on worker threads
# too): no log of zero, no division by zero, no overflow to inf.
def _finish(values: Any, dtype: np.dtype[Any]) -> np.ndarray:
    return np.asarray(values).astype(dtype)


def rand_default(rng: np.random.Generator, shape: Shape, dtype: np.dtype[Any]) -> np.ndarray:
    """Small ints (non-negative for unsigned), normal floats, random bools."""
    if dtype.kind == "b":
        return _finish(rng.random(shape) < 0.5, dtype)
    if dtype.kind == "u":
        return _finish(rng.integers(0, 10, shape), dtype)
    if dtype.kind == "i":
        return _finish(rng.integers(-9, 10, shape), dtype)
    if dtype.kind == "c":
        return _finish(rng.normal(0, 2, shape) + 1j * rng.normal(0, 2, shape), dtype)
    return _finish(rng.normal(0, 2, shape), dtype)


def rand_positive(rng: np.random.Generator, shape: Shape, dtype: np.dtype[Any]) -> np.ndarray:
    """Strictly positive values (for log, sqrt, a power's base)."""
    if dtype.kind == "b":
        return np.ones(shape, dtype)
    if dtype.kind in "iu":
        return _finish(rng.integers(1, 10, shape), dtype)
    if dtype.kind == "c":
        return _finish(rng.uniform(0.5, 4, shape) + 1j * rng.normal(0, 1, shape), dtype)
    return _finish(rng.uniform(0.5, 4, shape), dtype)


def rand_nonzero(rng: np.random.Generator, shape: Shape, dtype: np.dtype[Any]) -> np.ndarray:
    """Values away from zero, either sign where the dtype has one (divisors)."""
    magnitude = rand_positive(rng, shape, dtype)
    if dtype.kind in "iufc" and dtype.kind != "u":
        sign = np.where(rng.random(shape) < 0.5, -1, 1).astype(dtype)
        return _finish(magnitude * sign, dtype)
    return magnitude


def rand_small(rng: np.random.Generator, shape: Shape, dtype: np.dtype[Any]) -> np.ndarray:
    """Small exponents: 0..3 for integers, [-2, 2] for floats."""
    if dtype.kind == "b":
        return _finish(rng.random(shape) < 0.5, dtype)
    if dtype.kind in "iu":
        return _finish(rng.integers(0, 4, shape), dtype)
    if dtype.kind == "c":
        return _finish(rng.uniform(-1, 1, shape) + 1j * rng.uniform(-1, 1, shape), dtype)
    return _finish(rng.uniform(-2, 2, shape), dtype)


# -- tolerances ------------------------------------------------------------------------
_RTOL = {
    np.dtype(np.float16): 4e-3,
    FLOAT32: 2e-6,
    FLOAT64: 1e-13,
    np.dtype(np.complex64): 2e-6,
    COMPLEX128: 1e-13,
}


def tolerance(dtype: np.dtype[Any], factor: float = 1.0) -> tuple[float, float]:
    """``(rtol, atol)`` for comparing results of ``dtype``; exact for ints and bools."""
    rtol = _RTOL.get(np.dtype(dtype))
    if rtol is None:
        return 0.0, 0.0
    return rtol * factor, rtol * factor


# -- checking eagerrt against numpy --------------------------------------------------------
#: inline: the defaults; threaded: every op on a worker thread (inputs pending);
#: sync: ``ert.sync_mode()``.
MODES = ("inline", "threaded", "sync")


@contextlib.contextmanager
def run_mode(mode: str) -> Iterator[None]:
    if mode == "threaded":
        with ert.config.override(inline_threshold_ns=0):
            yield
    elif mode == "sync":
        with ert.sync_mode():
            yield
    else:
        assert mode == "inline"
        yield


def as_input(array: np.ndarray, mode: str) -> ert.Tensor:
    """``array`` as a tensor; in threaded mode, one still being computed."""
    t = ert.asarray(array)
    if mode == "threaded":
        t = t.reshape(array.shape)  # offloaded, so (most likely) pending
    return t


def check_result(got: Any, expected: Any, tol_factor: float = 1.0, what: str = "") -> None:
    """``got`` (a Tensor, or a list of them) equals numpy's ``expected``: metadata and data."""
    if isinstance(expected, (list, tuple)):
        assert isinstance(got, list), (
            f"{what}: expected a list of tensors, got {type(got).__name__}"
        )
        assert len(got) == len(expected), f"{what}: {len(got)} parts, numpy has {len(expected)}"
        for i, (g, e) in enumerate(zip(got, expected, strict=True)):
            check_result(g, e, tol_factor, f"{what} [part {i}]")
        return
    expected = np.asarray(expected)
    assert isinstance(got, ert.Tensor), f"{what}: returned {type(got).__name__}, not a Tensor"
    # The metadata, computed at the call, before any data is read.
    meta_shape, meta_dtype = got.shape, got.dtype
    data = got.numpy(timeout=60)
    assert isinstance(data, np.ndarray), what
    assert (meta_shape, meta_dtype) == (expected.shape, expected.dtype), (
        f"{what}: metadata {meta_shape} {meta_dtype}, numpy gives {expected.shape} "
        f"{expected.dtype} (the kernel produced {data.shape} {data.dtype})"
    )
    assert (data.shape, data.dtype) == (meta_shape, meta_dtype), (
        f"{what}: the kernel produced {data.shape} {data.dtype}, metadata said "
        f"{meta_shape} {meta_dtype}"
    )
    assert not data.flags.writeable, f"{what}: handed-out array is writeable"
    if expected.dtype.kind in "fc":
        rtol, atol = tolerance(expected.dtype, tol_factor)
        np.testing.assert_allclose(data, expected, rtol=rtol, atol=atol, err_msg=what)
    else:
        np.testing.assert_array_equal(data, expected, err_msg=what, strict=True)


def numpy_or_type_error(fn: Callable[..., Any], *args: Any) -> Any:
    """numpy's result, or None where numpy has no loop for these dtypes."""
    try:
        return fn(*args)
    except TypeError:
        return None


def result_data(got: Any) -> Any:
    """The data of a checked result (a tensor or a list of them), for comparing modes."""
    if isinstance(got, list):
        return [g.numpy() for g in got]
    return got.numpy()


def expect_type_error(make: Callable[[], Any], what: str) -> None:
    """numpy raises TypeError for this call: eagerrt must raise DTypeError at the call."""
    try:
        result = make()
    except ert.DTypeError:
        return
    # Read whatever came back, so no failure is left unobserved, then fail.
    try:
        outcome = f"returned {result!r}"
        result_data(result)
    except ert.KernelError as exc:
        outcome = f"deferred the failure to the read: {str(exc).splitlines()[0]}"
    raise AssertionError(f"{what}: numpy raises TypeError at the call; eagerrt {outcome}")


# -- the record ------------------------------------------------------------------------
@dataclass(frozen=True)
class OpRecord:
    """One op variant: eagerrt call, numpy reference, arity, dtypes, inputs, tolerance."""

    name: str
    nargs: int
    ert_fn: Callable[..., Any]
    np_fn: Callable[..., Any]
    dtypes: tuple[np.dtype[Any], ...]
    #: Each entry is one call's input shapes (``nargs`` of them).
    shapes: tuple[tuple[Shape, ...], ...]
    #: One generator per argument.
    gens: tuple[Gen, ...]
    #: Multiplies :func:`tolerance` (transcendental ops and fused kernels round more).
    tol: float = 1.0
    #: The dtypes of the arguments for a record dtype (default: all the same).
    arg_dtypes: Callable[[np.dtype[Any]], tuple[np.dtype[Any], ...]] | None = field(
        default=None, repr=False
    )

    def __post_init__(self) -> None:
        assert len(self.gens) == self.nargs, self.name
        assert all(len(s) == self.nargs for s in self.shapes), self.name

    def dtypes_of_args(self, dtype: np.dtype[Any]) -> tuple[np.dtype[Any], ...]:
        if self.arg_dtypes is None:
            return (dtype,) * self.nargs
        return self.arg_dtypes(dtype)


def _rec(
    name: str,
    nargs: int,
    ert_fn: Callable[..., Any],
    np_fn: Callable[..., Any],
    dtypes: Sequence[np.dtype[Any]],
    shapes: Sequence[Sequence[Shape]],
    gens: Gen | Sequence[Gen] = rand_default,
    tol: float = 1.0,
    arg_dtypes: Callable[[np.dtype[Any]], tuple[np.dtype[Any], ...]] | None = None,
) -> OpRecord:
    if callable(gens):
        gens = (gens,) * nargs
    return OpRecord(
        name,
        nargs,
        ert_fn,
        np_fn,
        tuple(np.dtype(d) for d in dtypes),
        tuple(tuple(tuple(s) for s in call) for call in shapes),
        tuple(gens),
        tol,
        arg_dtypes,
    )


UNARY_SHAPES: tuple[tuple[Shape], ...] = (
    ((),),
    ((0,),),
    ((5,),),
    ((2, 3),),
    ((2, 0, 3),),
    ((3, 1, 4),),
)
BINARY_SHAPES: tuple[tuple[Shape, Shape], ...] = (
    ((), ()),
    ((4,), (4,)),
    ((2, 3), (2, 3)),
    ((2, 3), (3,)),
    ((3,), (2, 3)),
    ((2, 1), (1, 4)),
    ((), (2, 3)),
    ((2, 3), ()),
    ((0, 3), (1, 3)),
    ((0,), ()),
    ((4, 1, 3), (2, 1)),
)
TERNARY_SHAPES: tuple[tuple[Shape, Shape, Shape], ...] = (
    ((), (), ()),
    ((2, 3), (2, 3), (2, 3)),
    ((2, 3), (3,), ()),
    ((2, 1), (1, 3), (2, 3)),
    ((0, 3), (3,), ()),
    ((4,), (), (4,)),
)

RECORDS: list[OpRecord] = []

# -- elementwise ufuncs ---------------------------------------------------------------------
_UNARY: dict[str, tuple[Any, Gen, float]] = {
    # name: (numpy reference, generator, tolerance factor)
    "abs": (np.absolute, rand_default, 1),
    "negative": (np.negative, rand_default, 1),
    "positive": (np.positive, rand_default, 1),
    "exp": (np.exp, rand_default, 4),
    "log": (np.log, rand_positive, 4),
    "sqrt": (np.sqrt, rand_positive, 4),
    "sin": (np.sin, rand_default, 4),
    "cos": (np.cos, rand_default, 4),
    "tanh": (np.tanh, rand_default, 4),
    "floor": (np.floor, rand_default, 1),
    "ceil": (np.ceil, rand_default, 1),
    "sign": (np.sign, rand_default, 1),
    "square": (np.square, rand_default, 1),
    "logical_not": (np.logical_not, rand_default, 1),
}
for _name, (_ref, _gen, _tol) in _UNARY.items():
    RECORDS.append(_rec(_name, 1, getattr(ert, _name), _ref, ALL, UNARY_SHAPES, _gen, _tol))


def rand_unit(rng: np.random.Generator, shape: Shape, dtype: np.dtype[Any]) -> np.ndarray:
    """Floats inside (-1, 1): where acos, asin and atanh are finite."""
    if dtype.kind == "c":
        return _finish(rng.uniform(-0.9, 0.9, shape) + 1j * rng.uniform(-0.5, 0.5, shape), dtype)
    return _finish(rng.uniform(-0.9, 0.9, shape), dtype)


def rand_above_one(rng: np.random.Generator, shape: Shape, dtype: np.dtype[Any]) -> np.ndarray:
    """Values of at least one (acosh's real domain)."""
    return _finish(rand_positive(rng, shape, dtype) + 1, dtype)


# The rest of the Array API's elementwise functions: name -> (numpy, generator, dtypes).
_NUMERIC = (*INTS, *FLOATS, COMPLEX128)
_INEXACT = (*FLOATS, COMPLEX128)
_INTEGRAL = (BOOL, *INTS)
_UNARY_API: dict[str, tuple[Any, Gen, Sequence[np.dtype[Any]]]] = {
    "acos": (np.arccos, rand_unit, _INEXACT),
    "asin": (np.arcsin, rand_unit, _INEXACT),
    "atanh": (np.arctanh, rand_unit, _INEXACT),
    "acosh": (np.arccosh, rand_above_one, _INEXACT),
    "asinh": (np.arcsinh, rand_default, _INEXACT),
    "atan": (np.arctan, rand_default, _INEXACT),
    "sinh": (np.sinh, rand_default, _INEXACT),
    "cosh": (np.cosh, rand_default, _INEXACT),
    "tan": (np.tan, rand_unit, _INEXACT),
    "expm1": (np.expm1, rand_default, _INEXACT),
    "log1p": (np.log1p, rand_positive, _INEXACT),
    "log2": (np.log2, rand_positive, _INEXACT),
    "log10": (np.log10, rand_positive, _INEXACT),
    "trunc": (np.trunc, rand_default, (*INTS, *FLOATS)),
    "signbit": (np.signbit, rand_default, FLOATS),
    "isfinite": (np.isfinite, rand_default, ALL),
    "isinf": (np.isinf, rand_default, ALL),
    "isnan": (np.isnan, rand_default, ALL),
    "conj": (np.conjugate, rand_default, _NUMERIC),
    "real": (np.real, rand_default, _NUMERIC),
    "imag": (
        lambda x: np.imag(x) if np.iscomplexobj(x) else np.zeros_like(x),
        rand_default,
        _NUMERIC,
    ),
    "reciprocal": (lambda x: np.divide(1.0, x), rand_nonzero, _NUMERIC),
    "bitwise_invert": (np.invert, rand_default, _INTEGRAL),
}
for _name, (_ref, _gen, _dtypes) in _UNARY_API.items():
    RECORDS.append(_rec(_name, 1, getattr(ert, _name), _ref, _dtypes, UNARY_SHAPES, _gen, 4))
_BINARY_API: dict[str, tuple[Any, tuple[Gen, Gen], Sequence[np.dtype[Any]]]] = {
    "atan2": (np.arctan2, (rand_default, rand_nonzero), FLOATS),
    "copysign": (np.copysign, (rand_default, rand_nonzero), FLOATS),
    "hypot": (np.hypot, (rand_default, rand_default), FLOATS),
    "logaddexp": (np.logaddexp, (rand_default, rand_default), FLOATS),
    "nextafter": (np.nextafter, (rand_default, rand_default), FLOATS),
    "bitwise_and": (np.bitwise_and, (rand_default, rand_default), _INTEGRAL),
    "bitwise_or": (np.bitwise_or, (rand_default, rand_default), _INTEGRAL),
    "bitwise_xor": (np.bitwise_xor, (rand_default, rand_default), _INTEGRAL),
    "bitwise_left_shift": (np.left_shift, (rand_positive, rand_small), INTS),
    "bitwise_right_shift": (np.right_shift, (rand_default, rand_small), INTS),
}
for _name, (_ref, _gens, _dtypes) in _BINARY_API.items():
    RECORDS.append(_rec(_name, 2, getattr(ert, _name), _ref, _dtypes, BINARY_SHAPES, _gens, 4))

RECORDS += [
    _rec("neg(alias)", 1, ert.neg, np.negative, ALL, UNARY_SHAPES),
    _rec("-x", 1, operator.neg, operator.neg, ALL, UNARY_SHAPES),
    _rec("+x", 1, operator.pos, operator.pos, ALL, UNARY_SHAPES),
    _rec("abs(x)", 1, abs, abs, ALL, UNARY_SHAPES),
]

_BINARY: dict[str, tuple[Any, tuple[Gen, Gen]]] = {
    "add": (np.add, (rand_default, rand_default)),
    "subtract": (np.subtract, (rand_default, rand_default)),
    "multiply": (np.multiply, (rand_default, rand_default)),
    "divide": (np.divide, (rand_default, rand_nonzero)),
    "floor_divide": (np.floor_divide, (rand_default, rand_nonzero)),
    "remainder": (np.remainder, (rand_default, rand_nonzero)),
    "power": (np.power, (rand_positive, rand_small)),
    "maximum": (np.maximum, (rand_default, rand_default)),
    "minimum": (np.minimum, (rand_default, rand_default)),
    "equal": (np.equal, (rand_default, rand_default)),
    "not_equal": (np.not_equal, (rand_default, rand_default)),
    "less": (np.less, (rand_default, rand_default)),
    "less_equal": (np.less_equal, (rand_default, rand_default)),
    "greater": (np.greater, (rand_default, rand_default)),
    "greater_equal": (np.greater_equal, (rand_default, rand_default)),
    "logical_and": (np.logical_and, (rand_default, rand_default)),
    "logical_or": (np.logical_or, (rand_default, rand_default)),
    "logical_xor": (np.logical_xor, (rand_default, rand_default)),
}
#: Binary ufunc name -> (numpy ufunc, generators): also used by the promotion tests.
BINARY_UFUNCS = _BINARY
for _name, (_ref, _gens) in _BINARY.items():
    RECORDS.append(_rec(_name, 2, getattr(ert, _name), _ref, ALL, BINARY_SHAPES, _gens, 4))
RECORDS.append(
    _rec("pow(alias)", 2, ert.pow, np.power, ALL, BINARY_SHAPES, (rand_positive, rand_small), 4)
)

# The operators, tensor on both sides, and with a numpy array on the left (which
# must hand the operation to the Tensor and give back a Tensor).
_OPERATORS: dict[str, tuple[Any, tuple[Gen, Gen]]] = {
    "+": (operator.add, (rand_default, rand_default)),
    "-": (operator.sub, (rand_default, rand_default)),
    "*": (operator.mul, (rand_default, rand_default)),
    "/": (operator.truediv, (rand_default, rand_nonzero)),
    "//": (operator.floordiv, (rand_default, rand_nonzero)),
    "%": (operator.mod, (rand_default, rand_nonzero)),
    "**": (operator.pow, (rand_positive, rand_small)),
    "==": (operator.eq, (rand_default, rand_default)),
    "!=": (operator.ne, (rand_default, rand_default)),
    "<": (operator.lt, (rand_default, rand_default)),
    "<=": (operator.le, (rand_default, rand_default)),
    ">": (operator.gt, (rand_default, rand_default)),
    ">=": (operator.ge, (rand_default, rand_default)),
}
#: Operator symbol -> (operator function, generators): also used by the scalar tests.
OPERATORS = _OPERATORS


def _numpy_on_left(fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def call(a: Any, b: Any) -> Any:
        return fn(np.array(a), b)  # a plain (writeable) ndarray on the left

    return call


for _sym, (_fn, _gens) in _OPERATORS.items():
    RECORDS.append(_rec(f"t{_sym}t", 2, _fn, _fn, ALL, BINARY_SHAPES, _gens, 4))
    RECORDS.append(
        _rec(f"ndarray{_sym}t", 2, _numpy_on_left(_fn), _fn, ALL, BINARY_SHAPES[:6], _gens, 4)
    )

# Python scalars on either side stay weak (NEP 50): int8 * 2 is int8, float32 + 1.5
# is float32, int8 + 1.5 is float64.
_SCALARS: tuple[Any, ...] = (True, 2, 1.5, 1j)
_SCALAR_SHAPES = (((),), ((4,),), ((2, 3),), ((0,),))
for _sym, (_fn, (_gen_left, _gen_right)) in _OPERATORS.items():
    # numpy's ``array ** 2`` takes a fast path through np.square, which gives
    # int8 rather than np.power's int64 for bool arrays; eagerrt follows np.power.
    _ref = np.power if _sym == "**" else _fn
    for _s in _SCALARS:
        if _sym in ("/", "//", "%"):
            _tensor_right = rand_nonzero
        elif _sym == "**":
            _tensor_right = rand_small
        else:
            _tensor_right = _gen_right
        RECORDS.append(
            _rec(
                f"t{_sym}{_s!r}",
                1,
                lambda x, fn=_fn, s=_s: fn(x, s),
                lambda x, fn=_ref, s=_s: fn(x, s),
                ALL,
                _SCALAR_SHAPES,
                _gen_left,
                4,
            )
        )
        RECORDS.append(
            _rec(
                f"{_s!r}{_sym}t",
                1,
                lambda x, fn=_fn, s=_s: fn(s, x),
                lambda x, fn=_fn, s=_s: fn(s, x),
                ALL,
                _SCALAR_SHAPES,
                _tensor_right,
                4,
            )
        )
RECORDS += [
    _rec("add(t, 2)", 1, lambda x: ert.add(x, 2), lambda x: np.add(x, 2), ALL, _SCALAR_SHAPES),
    _rec(
        "maximum(1.5, t)",
        1,
        lambda x: ert.maximum(1.5, x),
        lambda x: np.maximum(1.5, x),
        ALL,
        _SCALAR_SHAPES,
    ),
    _rec(
        "logical_and(t, True)",
        1,
        lambda x: ert.logical_and(x, True),
        lambda x: np.logical_and(x, True),
        ALL,
        _SCALAR_SHAPES,
    ),
]


# -- activations ------------------------------------------------------------------------
def _float_result(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The dtype numpy's exp gives (what sigmoid, gelu and softmax return)."""
    return np.exp(np.empty(0, dtype)).dtype


def _in_float64(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """Reference computed in float64 (complex128), returned in exp's dtype."""

    def ref(x: np.ndarray) -> np.ndarray:
        out = _float_result(x.dtype)
        wide = np.complex128 if out.kind == "c" else np.float64
        return np.asarray(fn(x.astype(wide))).astype(out)

    return ref


_erf = np.vectorize(math.erf, otypes=[np.float64])


def _gelu_erf_ref(x: np.ndarray) -> np.ndarray:
    return x * 0.5 * (1.0 + _erf(x / math.sqrt(2.0)))


def _gelu_tanh_ref(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def _sigmoid_ref(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


RECORDS += [
    _rec("sigmoid", 1, ert.sigmoid, _in_float64(_sigmoid_ref), ALL, UNARY_SHAPES, tol=8),
    _rec("relu", 1, ert.relu, lambda x: np.maximum(x, 0), ALL, UNARY_SHAPES),
    _rec("gelu", 1, ert.gelu, _in_float64(_gelu_erf_ref), ALL_REAL, UNARY_SHAPES, tol=8),
    _rec(
        "gelu(approximate='none')",
        1,
        lambda x: ert.gelu(x, approximate="none"),
        _in_float64(_gelu_erf_ref),
        FLOATS,
        UNARY_SHAPES,
        tol=8,
    ),
    _rec(
        "gelu(approximate='tanh')",
        1,
        lambda x: ert.gelu(x, approximate="tanh"),
        _in_float64(_gelu_tanh_ref),
        ALL_REAL,
        UNARY_SHAPES,
        tol=8,
    ),
]


# -- where, clip, round -------------------------------------------------------------------
def _where_dtypes(d: np.dtype[Any]) -> tuple[np.dtype[Any], ...]:
    return (BOOL, d, d)


RECORDS += [
    _rec("where", 3, ert.where, np.where, ALL, TERNARY_SHAPES, arg_dtypes=_where_dtypes),
    _rec("where(non-bool cond)", 3, ert.where, np.where, ALL, TERNARY_SHAPES[:3]),
    _rec(
        "where(c, x, 0)",
        2,
        lambda c, x: ert.where(c, x, 0),
        lambda c, x: np.where(c, x, 0),
        ALL,
        BINARY_SHAPES[:8],
        arg_dtypes=lambda d: (BOOL, d),
    ),
    _rec(
        "where(c, 1.5, x)",
        2,
        lambda c, x: ert.where(c, 1.5, x),
        lambda c, x: np.where(c, 1.5, x),
        ALL,
        BINARY_SHAPES[:8],
        arg_dtypes=lambda d: (BOOL, d),
    ),
    _rec("clip(x, lo, hi)", 3, ert.clip, np.clip, ALL, TERNARY_SHAPES),
    _rec(
        "clip(x, 0, 5)",
        1,
        lambda x: ert.clip(x, 0, 5),
        lambda x: np.clip(x, 0, 5),
        ALL,
        UNARY_SHAPES,
    ),
    _rec(
        "clip(x, 0.5, 2.5)",
        1,
        lambda x: ert.clip(x, 0.5, 2.5),
        lambda x: np.clip(x, 0.5, 2.5),
        ALL,
        UNARY_SHAPES,
    ),
    _rec(
        "clip(x, min=1)",
        1,
        lambda x: ert.clip(x, min=1),
        lambda x: np.clip(x, 1, None),
        ALL_REAL,
        UNARY_SHAPES,
    ),
    _rec(
        "clip(x, max=1)",
        1,
        lambda x: ert.clip(x, max=1),
        lambda x: np.clip(x, None, 1),
        ALL_REAL,
        UNARY_SHAPES,
    ),
    _rec("round", 1, ert.round, np.round, ALL, UNARY_SHAPES),
    _rec(
        "round(decimals=1)",
        1,
        lambda x: ert.round(x, decimals=1),
        lambda x: np.round(x, 1),
        ALL,
        UNARY_SHAPES,
    ),
    _rec(
        "round(decimals=-1)",
        1,
        lambda x: ert.round(x, decimals=-1),
        lambda x: np.round(x, -1),
        (*INTS, *FLOATS),
        UNARY_SHAPES,
    ),
]


# -- reductions -----------------------------------------------------------------------------
def _reduced_count(shape: Shape, axis: Any) -> int:
    if axis is None:
        return math.prod(shape)
    axes = (axis,) if isinstance(axis, int) else axis
    return math.prod(shape[a] for a in axes)


_RED_SHAPES: dict[str, tuple[Shape, ...]] = {
    "any": ((), (0,), (5,), (2, 3), (2, 0, 3), (3, 1, 4)),
    "nd>=1": ((0,), (5,), (2, 3), (0, 3), (2, 0, 3), (3, 1, 4)),
    "nd>=2": ((2, 3), (0, 3), (3, 0), (2, 0, 3), (3, 1, 4)),
    "nd>=3": ((2, 0, 3), (3, 1, 4), (2, 3, 2)),
}
_AXES: tuple[tuple[Any, bool, str], ...] = (
    (None, False, "any"),
    (None, True, "any"),
    ((), False, "any"),
    (0, False, "nd>=1"),
    (-1, True, "nd>=1"),
    (1, False, "nd>=2"),
    ((0, 1), True, "nd>=2"),
    ((-1, 0), False, "nd>=3"),
    ((2, 0, 1), False, "nd>=3"),
)
# numpy warns (an error here) for the mean of nothing; max and min have no identity.
_NEEDS_ELEMENTS = {"max": 1, "min": 1, "mean": 1, "var": 1, "std": 1}
_REDUCTIONS: dict[str, tuple[Any, dict[str, Any]]] = {
    "sum": (np.sum, {}),
    "prod": (np.prod, {}),
    "mean": (np.mean, {}),
    "max": (np.max, {}),
    "min": (np.min, {}),
    "var": (np.var, {}),
    "std": (np.std, {}),
    "var(ddof=1)": (np.var, {"ddof": 1}),
    "std(ddof=1)": (np.std, {"ddof": 1}),
}


def _reduction_fn(
    name: str, axis: Any, keepdims: bool, params: dict[str, Any], *, method: bool
) -> Callable[[Any], Any]:
    op = name.split("(")[0]
    if method:
        return lambda x: getattr(x, op)(axis=axis, keepdims=keepdims, **params)
    fn = getattr(ert, op)
    return lambda x: fn(x, axis=axis, keepdims=keepdims, **params)


for _name, (_ref, _params) in _REDUCTIONS.items():
    _op = _name.split("(")[0]
    _least = _NEEDS_ELEMENTS.get(_op, 0) + _params.get("ddof", 0)
    for _axis, _keep, _kind in _AXES:
        _shapes = [(s,) for s in _RED_SHAPES[_kind] if _reduced_count(s, _axis) >= max(_least, 0)]
        if not _shapes:
            continue
        for _method in (False, True) if _axis in (None, -1) else (False,):
            RECORDS.append(
                _rec(
                    f"{'t.' if _method else ''}{_name}(axis={_axis}, keepdims={_keep})",
                    1,
                    _reduction_fn(_name, _axis, _keep, _params, method=_method),
                    lambda x, ref=_ref, a=_axis, k=_keep, p=_params: ref(
                        x, axis=a, keepdims=k, **p
                    ),
                    ALL,
                    _shapes,
                    tol=16,
                )
            )

_ARG_AXES: tuple[tuple[Any, bool, tuple[Shape, ...]], ...] = (
    (None, False, ((), (5,), (2, 3), (3, 1, 4))),
    (None, True, ((), (5,), (2, 3), (3, 1, 4))),
    (0, False, ((5,), (2, 3), (3, 1, 4))),
    (-1, True, ((5,), (2, 3), (3, 1, 4))),
    (1, False, ((2, 3), (3, 1, 4))),
)
for _name in ("argmax", "argmin"):
    _ert_op, _np_op = getattr(ert, _name), getattr(np, _name)
    for _axis, _keep, _shapes in _ARG_AXES:
        RECORDS.append(
            _rec(
                f"{_name}(axis={_axis}, keepdims={_keep})",
                1,
                lambda x, fn=_ert_op, a=_axis, k=_keep: fn(x, axis=a, keepdims=k),
                lambda x, fn=_np_op, a=_axis, k=_keep: fn(x, axis=a, keepdims=k),
                ALL,
                [(s,) for s in _shapes],
            )
        )
        if not _keep:
            RECORDS.append(
                _rec(
                    f"t.{_name}(axis={_axis})",
                    1,
                    lambda x, n=_name, a=_axis: getattr(x, n)(axis=a),
                    lambda x, fn=_np_op, a=_axis: fn(x, axis=a),
                    ALL,
                    [(s,) for s in _shapes],
                )
            )


# -- matmul and tensordot ----------------------------------------------------------------------
_MATMUL_SHAPES = (
    ((2, 3), (3, 4)),
    ((3,), (3,)),
    ((3,), (3, 4)),
    ((2, 3), (3,)),
    ((5, 2, 3), (3, 4)),
    ((3,), (5, 3, 2)),
    ((5, 2, 3), (1, 3, 4)),
    ((2, 1, 2, 3), (3, 3, 2)),
    ((0, 3), (3, 2)),
    ((2, 0), (0, 3)),
    ((1, 1), (1, 1)),
)
RECORDS += [
    _rec("matmul", 2, ert.matmul, np.matmul, ALL, _MATMUL_SHAPES, tol=16),
    _rec("a @ b", 2, operator.matmul, operator.matmul, ALL, _MATMUL_SHAPES, tol=16),
    _rec(
        "ndarray @ t",
        2,
        _numpy_on_left(operator.matmul),
        operator.matmul,
        ALL,
        _MATMUL_SHAPES[:4],
        tol=16,
    ),
]
for _axes, _shapes in (
    (2, (((2, 3, 4), (3, 4, 5)), ((3, 4), (3, 4)), ((0, 2, 2), (2, 2, 3)))),
    (1, (((2, 3), (3, 4)), ((4,), (4, 2)), ((2, 3, 4), (4,)))),
    (0, (((2,), (3,)), ((), (2, 2)), ((2, 3), ()))),
    (([1, 0], [0, 1]), (((3, 2, 4), (2, 3, 5)),)),
    (([-1], [0]), (((2, 3), (3, 2)), ((2, 2, 3), (3,)))),
    ((1, 0), (((2, 3), (3, 4)),)),
):
    RECORDS.append(
        _rec(
            f"tensordot(axes={_axes})",
            2,
            lambda a, b, ax=_axes: ert.tensordot(a, b, axes=ax),
            lambda a, b, ax=_axes: np.tensordot(a, b, axes=ax),
            ALL,
            _shapes,
            tol=16,
        )
    )
RECORDS.append(
    _rec(
        "tensordot(default)", 2, ert.tensordot, np.tensordot, ALL, (((2, 3, 4), (3, 4, 5)),), tol=16
    )
)

for _equation, _arity, _shapes in (
    ("ij,jk->ik", 2, (((2, 3), (3, 4)), ((0, 3), (3, 2)))),
    ("bij,bjk", 2, (((2, 2, 3), (2, 3, 4)),)),
    ("...i,...i->...", 2, (((2, 3), (1, 3)), ((3,), (2, 3)))),
    ("ii->i", 1, (((3, 3),),)),
    ("ij->", 1, (((2, 3),), ((0, 2),))),
):
    RECORDS.append(
        _rec(
            f"einsum({_equation})",
            _arity,
            lambda *xs, eq=_equation: ert.einsum(eq, *xs),
            lambda *xs, eq=_equation: np.einsum(eq, *xs),
            ALL,
            _shapes,
            tol=16,
        )
    )

# -- shape manipulation, indexing, casts ------------------------------------------------------
_ANY_SHAPES = (((),), ((0,),), ((6,),), ((2, 3),), ((2, 0, 3),), ((3, 1, 4),))


def _rotate(ndim: int) -> tuple[int, ...]:
    return (*range(1, ndim), 0) if ndim else ()


RECORDS += [
    _rec(
        "reshape(-1)",
        1,
        lambda x: ert.reshape(x, shape=-1),
        lambda x: np.reshape(x, -1),
        ALL,
        _ANY_SHAPES,
    ),
    _rec(
        "reshape((-1,))",
        1,
        lambda x: ert.reshape(x, shape=(-1,)),
        lambda x: np.reshape(x, (-1,)),
        ALL,
        _ANY_SHAPES,
    ),
    _rec(
        "reshape(reversed)",
        1,
        lambda x: ert.reshape(x, shape=x.shape[::-1]),
        lambda x: np.reshape(x, x.shape[::-1]),
        ALL,
        _ANY_SHAPES,
    ),
    _rec(
        "reshape(size, 1, -1)",
        1,
        lambda x: ert.reshape(x, shape=(x.size, 1, -1)),
        lambda x: np.reshape(x, (x.size, 1, -1)),
        ALL,
        (((),), ((6,),), ((2, 3),), ((3, 1, 4),)),
    ),
    _rec(
        "reshape(-1, 2)",
        1,
        lambda x: ert.reshape(x, shape=(-1, 2)),
        lambda x: np.reshape(x, (-1, 2)),
        ALL,
        (((6,),), ((2, 3),), ((3, 1, 4),), ((2, 0, 3),)),
    ),
    _rec(
        "t.reshape(*s)",
        1,
        lambda x: x.reshape(*x.shape[::-1]),
        lambda x: x.reshape(*x.shape[::-1]),
        ALL,
        _ANY_SHAPES[1:],
    ),
    _rec(
        "t.reshape(s)",
        1,
        lambda x: x.reshape(x.shape[::-1]),
        lambda x: x.reshape(x.shape[::-1]),
        ALL,
        _ANY_SHAPES,
    ),
    _rec("transpose", 1, ert.transpose, np.transpose, ALL, _ANY_SHAPES),
    _rec(
        "transpose(axes=rotated)",
        1,
        lambda x: ert.transpose(x, axes=_rotate(x.ndim)),
        lambda x: np.transpose(x, _rotate(x.ndim)),
        ALL,
        _ANY_SHAPES,
    ),
    _rec(
        "transpose(axes=negative)",
        1,
        lambda x: ert.transpose(x, axes=(-1, 0, -2)),
        lambda x: np.transpose(x, (-1, 0, -2)),
        ALL,
        (((2, 0, 3),), ((3, 1, 4),)),
    ),
    _rec(
        "permute_dims",
        1,
        lambda x: ert.permute_dims(x, _rotate(x.ndim)),
        lambda x: np.permute_dims(x, _rotate(x.ndim)),
        ALL,
        _ANY_SHAPES,
    ),
    _rec(
        "permute",
        1,
        lambda x: ert.permute(x, list(_rotate(x.ndim))),
        lambda x: np.transpose(x, _rotate(x.ndim)),
        ALL,
        _ANY_SHAPES,
    ),
    _rec("t.T", 1, lambda x: x.T, lambda x: x.T, ALL, _ANY_SHAPES),
    _rec("t.transpose()", 1, lambda x: x.transpose(), lambda x: x.transpose(), ALL, _ANY_SHAPES),
    _rec(
        "t.transpose(*axes)",
        1,
        lambda x: x.transpose(*_rotate(x.ndim)),
        lambda x: x.transpose(*_rotate(x.ndim)),
        ALL,
        _ANY_SHAPES[1:],
    ),
    _rec(
        "t.transpose(axes)",
        1,
        lambda x: x.transpose(_rotate(x.ndim)),
        lambda x: x.transpose(_rotate(x.ndim)),
        ALL,
        _ANY_SHAPES,
    ),
    _rec(
        "expand_dims(0)",
        1,
        lambda x: ert.expand_dims(x, axis=0),
        lambda x: np.expand_dims(x, 0),
        ALL,
        _ANY_SHAPES,
    ),
    _rec(
        "expand_dims(-1)",
        1,
        lambda x: ert.expand_dims(x, axis=-1),
        lambda x: np.expand_dims(x, -1),
        ALL,
        _ANY_SHAPES,
    ),
    _rec(
        "expand_dims((0, -1))",
        1,
        lambda x: ert.expand_dims(x, axis=(0, -1)),
        lambda x: np.expand_dims(x, (0, -1)),
        ALL,
        _ANY_SHAPES,
    ),
    _rec(
        "expand_dims(positional)",
        1,
        lambda x: ert.expand_dims(x, 1),
        lambda x: np.expand_dims(x, 1),
        ALL,
        _ANY_SHAPES[1:],
    ),
    _rec(
        "squeeze",
        1,
        ert.squeeze,
        np.squeeze,
        ALL,
        (((),), ((1,),), ((1, 3, 1),), ((2, 1, 0),), ((2, 3),)),
    ),
    _rec(
        "squeeze(axis=0)",
        1,
        lambda x: ert.squeeze(x, axis=0),
        lambda x: np.squeeze(x, axis=0),
        ALL,
        (((1,),), ((1, 3, 1),), ((1, 0),)),
    ),
    _rec(
        "squeeze(axis=(0, -1))",
        1,
        lambda x: ert.squeeze(x, axis=(0, -1)),
        lambda x: np.squeeze(x, axis=(0, -1)),
        ALL,
        (((1, 3, 1),), ((1, 1),)),
    ),
    _rec(
        "broadcast_to",
        1,
        lambda x: ert.broadcast_to(x, shape=(2, 3, 4)),
        lambda x: np.broadcast_to(x, (2, 3, 4)),
        ALL,
        (((),), ((4,),), ((3, 1),), ((1, 3, 4),), ((2, 3, 4),), ((2, 1, 1),)),
    ),
    _rec(
        "broadcast_to(empty)",
        1,
        lambda x: ert.broadcast_to(x, shape=(0, 3)),
        lambda x: np.broadcast_to(x, (0, 3)),
        ALL,
        (((),), ((3,),), ((1, 3),), ((0, 1),)),
    ),
    _rec(
        "concat",
        2,
        lambda a, b: ert.concat([a, b]),
        lambda a, b: np.concatenate([a, b]),
        ALL,
        (((2, 3), (4, 3)), ((0, 3), (2, 3)), ((3,), (2,)), ((0,), (0,))),
    ),
    _rec(
        "concat(axis=1)",
        2,
        lambda a, b: ert.concat([a, b], axis=1),
        lambda a, b: np.concatenate([a, b], axis=1),
        ALL,
        (((2, 3), (2, 1)), ((2, 0), (2, 2)), ((2, 3, 1), (2, 2, 1))),
    ),
    _rec(
        "concat(axis=-1)",
        2,
        lambda a, b: ert.concat([a, b], axis=-1),
        lambda a, b: np.concatenate([a, b], axis=-1),
        ALL,
        (((2, 3), (2, 1)), ((2, 2, 1), (2, 2, 3))),
    ),
    _rec(
        "concat(axis=None)",
        2,
        lambda a, b: ert.concat([a, b], axis=None),
        lambda a, b: np.concatenate([a, b], axis=None),
        ALL,
        (((2, 3), (4,)), ((), (2, 2)), ((0, 3), ())),
    ),
    _rec(
        "concat(3 tensors)",
        3,
        lambda a, b, c: ert.concat((a, b, c), axis=0),
        lambda a, b, c: np.concatenate((a, b, c)),
        ALL,
        (((1, 2), (2, 2), (0, 2)),),
    ),
    _rec(
        "concat(1 tensor)",
        1,
        lambda a: ert.concat([a]),
        lambda a: np.concatenate([a]),
        ALL,
        (((3,),), ((2, 2),)),
    ),
    _rec(
        "stack",
        2,
        lambda a, b: ert.stack([a, b]),
        lambda a, b: np.stack([a, b]),
        ALL,
        (((), ()), ((3,), (3,)), ((2, 3), (2, 3)), ((0, 2), (0, 2))),
    ),
    _rec(
        "stack(axis=1)",
        2,
        lambda a, b: ert.stack([a, b], axis=1),
        lambda a, b: np.stack([a, b], axis=1),
        ALL,
        (((3,), (3,)), ((2, 3), (2, 3))),
    ),
    _rec(
        "stack(axis=-1)",
        3,
        lambda a, b, c: ert.stack([a, b, c], axis=-1),
        lambda a, b, c: np.stack([a, b, c], axis=-1),
        ALL,
        (((), (), ()), ((2, 3), (2, 3), (2, 3))),
    ),
    _rec(
        "split(3)",
        1,
        lambda x: ert.split(x, 3),
        lambda x: np.split(x, 3),
        ALL,
        (((6,),), ((3, 2),), ((0,),)),
    ),
    _rec(
        "split([1, 4])",
        1,
        lambda x: ert.split(x, [1, 4]),
        lambda x: np.split(x, [1, 4]),
        ALL,
        (((6,),), ((5, 2),)),
    ),
    _rec(
        "split([2, 10])",
        1,
        lambda x: ert.split(x, [2, 10]),
        lambda x: np.split(x, [2, 10]),
        ALL,
        (((6,),),),
    ),
    _rec("split([])", 1, lambda x: ert.split(x, []), lambda x: np.split(x, []), ALL, (((6,),),)),
    _rec(
        "split(2, axis=-1)",
        1,
        lambda x: ert.split(x, 2, axis=-1),
        lambda x: np.split(x, 2, axis=-1),
        ALL,
        (((2, 6),), ((3, 1, 4),)),
    ),
    _rec(
        "split([1], axis=1)",
        1,
        lambda x: ert.split(x, [1], axis=1),
        lambda x: np.split(x, [1], axis=1),
        ALL,
        (((2, 6),), ((2, 0, 3),)),
    ),
]

_INDEXES: tuple[tuple[str, Any, tuple[Shape, ...]], ...] = (
    ("0", 0, ((4,), (4, 5), (4, 5, 6))),
    ("-1", -1, ((4,), (4, 5))),
    ("np.int64(2)", np.int64(2), ((4, 5),)),
    ("(0, 0)", (0, 0), ((4, 5), (4, 5, 6))),
    ("(1, -2, 3)", (1, -2, 3), ((4, 5, 6),)),
    ("1:", slice(1, None), ((4,), (4, 5))),
    ("::-1", slice(None, None, -1), ((4,), (4, 5), (0,))),
    ("::-2", slice(None, None, -2), ((5,), (4, 5))),
    ("3:0:-1", slice(3, 0, -1), ((4,), (4, 5))),
    ("-3:-1", slice(-3, -1), ((4,), (4, 5))),
    ("5:10 (empty)", slice(5, 10), ((4,), (4, 5))),
    ("(:, 1)", (slice(None), 1), ((4, 5), (4, 5, 6))),
    ("(..., 1)", (Ellipsis, 1), ((4, 5), (4, 5, 6), (2,))),
    ("...", Ellipsis, ((), (4, 5))),
    ("()", (), ((), (4, 5))),
    ("None", None, ((), (4,), (4, 5))),
    ("(None, 0)", (None, 0), ((4, 5),)),
    ("(1:3, None, ..., -1)", (slice(1, 3), None, Ellipsis, -1), ((4, 5), (4, 5, 6))),
    ("(..., None)", (Ellipsis, None), ((), (4, 5))),
    ("(::2, ::-3)", (slice(None, None, 2), slice(None, None, -3)), ((4, 5), (4, 5, 6))),
)
for _label, _index, _shapes in _INDEXES:
    RECORDS.append(
        _rec(
            f"t[{_label}]",
            1,
            lambda x, i=_index: x[i],
            lambda x, i=_index: x[i],
            ALL,
            [(s,) for s in _shapes],
        )
    )
    RECORDS.append(
        _rec(
            f"getitem(index={_label})",
            1,
            lambda x, i=_index: ert.getitem(x, index=i),
            lambda x, i=_index: x[i],
            (FLOAT32,),
            [(s,) for s in _shapes],
        )
    )

_TAKES: tuple[tuple[str, list[Any] | int, Any, tuple[Shape, ...]], ...] = (
    # label, indices, axis, shapes (indices are in range for every shape)
    ("[0, 3, -1]", [0, 3, -1], None, ((4,), (2, 2), (4, 5))),
    ("[[1, 0], [2, 2]]", [[1, 0], [2, 2]], None, ((3,), (4, 5))),
    ("2 (0-d)", 2, None, ((3,), (2, 2))),
    ("[] (empty)", [], None, ((3,), (2, 2))),
    ("[1, 1, 0] axis=0", [1, 1, 0], 0, ((2,), (2, 3), (2, 0, 3))),
    ("[2, -1] axis=-1", [2, -1], -1, ((3,), (2, 3), (4, 1, 3))),
    ("[[0], [1]] axis=1", [[0], [1]], 1, ((3, 2), (2, 2, 4))),
    ("0 (0-d) axis=1", 0, 1, ((3, 2), (2, 1, 4))),
)
for _label, _idx, _axis, _shapes in _TAKES:
    for _idx_dtype in (INT64, INT8):
        RECORDS.append(
            _rec(
                f"take({_label}, {_idx_dtype})",
                1,
                lambda x, i=_idx, a=_axis, d=_idx_dtype: ert.take(
                    x, ert.asarray(np.asarray(i, d)), axis=a
                ),
                lambda x, i=_idx, a=_axis, d=_idx_dtype: np.take(x, np.asarray(i, d), axis=a),
                ALL,
                [(s,) for s in _shapes],
            )
        )
RECORDS.append(
    _rec(
        "take(axis omitted)",
        1,
        lambda x: ert.take(x, ert.asarray([0, 2])),
        lambda x: np.take(x, [0, 2]),
        ALL,
        (((3,),), ((2, 2),)),
    )
)

for _target in ALL:
    RECORDS.append(
        _rec(
            f"astype({_target})",
            1,
            lambda x, d=_target: ert.astype(x, d),
            lambda x, d=_target: x.astype(d),
            # complex -> real casts warn (ComplexWarning) in numpy
            ALL if _target.kind == "c" else ALL_REAL,
            UNARY_SHAPES,
            rand_positive,
        )
    )
RECORDS += [
    _rec(
        "t.astype('float32')",
        1,
        lambda x: x.astype("float32"),
        lambda x: x.astype("float32"),
        ALL_REAL,
        UNARY_SHAPES,
    ),
    _rec(
        "t.astype(np.int8)",
        1,
        lambda x: x.astype(np.int8),
        lambda x: x.astype(np.int8),
        ALL_REAL,
        UNARY_SHAPES,
        rand_positive,
    ),
    _rec(
        "astype(x, 'int32')",
        1,
        lambda x: ert.astype(x, "int32"),
        lambda x: x.astype("int32"),
        ALL_REAL,
        UNARY_SHAPES,
        rand_positive,
    ),
    _rec("asarray(t)", 1, ert.asarray, np.asarray, ALL, UNARY_SHAPES),
    _rec(
        "asarray(t, dtype='float64')",
        1,
        lambda x: ert.asarray(x, dtype="float64"),
        lambda x: np.asarray(x, dtype="float64"),
        ALL_REAL,
        UNARY_SHAPES,
    ),
    _rec(
        "asarray(t, copy=True)",
        1,
        lambda x: ert.asarray(x, copy=True),
        lambda x: np.array(x, copy=True),
        ALL,
        UNARY_SHAPES,
    ),
]


# -- softmax / log_softmax -------------------------------------------------------------------
def _softmax_ref(axis: int, log: bool) -> Callable[[np.ndarray], np.ndarray]:
    def ref(x: np.ndarray) -> np.ndarray:
        shifted = x - np.max(x, axis=axis, keepdims=True)
        total = np.sum(np.exp(shifted), axis=axis, keepdims=True)
        return shifted - np.log(total) if log else np.exp(shifted) / total

    return _in_float64(ref)


# Floats over the last axis with >= 16 columns take the fused numba kernel on the
# CPU; fewer columns, another axis or an integer input take the numpy one.
_SOFTMAX_CASES: tuple[tuple[str, int | None, tuple[Shape, ...]], ...] = (
    ("fused", None, ((2, 20), (20,), (3, 4, 17), (1, 16))),
    ("fused", -1, ((2, 20), (0, 20))),
    ("numpy", -1, ((3, 5), (5,), (2, 3, 15), (4, 1))),
    ("numpy", 0, ((20, 3), (5,), (17,), (3, 20))),
    ("numpy", 1, ((2, 20, 3), (2, 20))),
    ("numpy", -2, ((2, 20, 3),)),
)
for _log in (False, True):
    _opname = "log_softmax" if _log else "softmax"
    _ert_op = getattr(ert, _opname)
    for _path, _axis, _shapes in _SOFTMAX_CASES:
        _ax = -1 if _axis is None else _axis
        RECORDS.append(
            _rec(
                f"{_opname}({'' if _axis is None else f'axis={_axis}'}) [{_path}]",
                1,
                _ert_op if _axis is None else lambda x, fn=_ert_op, a=_axis: fn(x, axis=a),
                _softmax_ref(_ax, _log),
                ALL_REAL,
                [(s,) for s in _shapes],
                tol=16,
            )
        )


# -- Array API 2024.12: creation from tensors, manipulation, statistics, search, sort, sets --
def _rand_ties(rng: np.random.Generator, shape: Shape, dtype: np.dtype[Any]) -> np.ndarray:
    """Few distinct values, so sorts meet ties (and stability shows)."""
    return _finish(rng.integers(0, 3, shape), dtype)


def _rand_sorted(rng: np.random.Generator, shape: Shape, dtype: np.dtype[Any]) -> np.ndarray:
    """Ascending values along the last axis (searchsorted's x1)."""
    return np.sort(_rand_ties(rng, shape, dtype), axis=-1)


def _rand_counts(rng: np.random.Generator, shape: Shape, dtype: np.dtype[Any]) -> np.ndarray:
    """Repeat counts: small non-negative ints."""
    return _finish(rng.integers(0, 3, shape), dtype)


def _stable_descending(x: np.ndarray, axis: int) -> np.ndarray:
    """Indices sorting ``x`` descending along ``axis``, ties in their original order
    (Python's sort with reverse=True keeps stability)."""
    moved = np.moveaxis(x, axis, -1)
    out = np.empty(moved.shape, np.int64)
    for index in np.ndindex(moved.shape[:-1]):
        row = moved[index].tolist()
        out[index] = sorted(range(len(row)), key=row.__getitem__, reverse=True)
    return np.moveaxis(out, -1, axis)


def _unique_ref(x: np.ndarray) -> list[np.ndarray]:
    """values, first indices, inverse (x's shape), counts: NaNs distinct."""
    values, first, inverse, counts = np.unique(
        x.reshape(-1), return_index=True, return_inverse=True, return_counts=True, equal_nan=False
    )
    return [values, first, inverse.reshape(x.shape), counts]


def _as_int64(arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [np.asarray(a, dtype=np.int64) for a in arrays]


_ND1 = (((0,),), ((5,),), ((2, 3),), ((2, 0, 3),), ((3, 1, 4),))
_ND2 = (((2, 3),), ((3, 3),), ((0, 3),), ((2, 3, 4),))
_CUMULATIVE: tuple[tuple[str, dict[str, Any], tuple[tuple[Shape], ...]], ...] = (
    ("axis=None", {}, (((0,),), ((5,),))),
    ("axis=0", {"axis": 0}, _ND1),
    ("axis=-1, include_initial", {"axis": -1, "include_initial": True}, _ND1),
    ("axis=1, dtype=float64", {"axis": 1, "dtype": FLOAT64}, (((2, 3),), ((3, 0),))),
)
RECORDS += [
    _rec(
        f"{_name}(k={_k})",
        1,
        lambda x, n=_name, k=_k: getattr(ert, n)(x, k=k),
        lambda x, n=_name, k=_k: getattr(np, n)(x, k),
        ALL,
        _ND2,
    )
    for _name in ("tril", "triu")
    for _k in (0, 1, -1)
]
for _indexing in ("xy", "ij"):
    RECORDS.append(
        _rec(
            f"meshgrid(indexing={_indexing})",
            2,
            lambda a, b, i=_indexing: ert.meshgrid(a, b, indexing=i),
            lambda a, b, i=_indexing: np.meshgrid(a, b, indexing=i),
            ALL,
            (((3,), (2,)), ((0,), (4,)), ((1,), (1,)), ((4,), (3,))),
        )
    )
RECORDS += [
    _rec(
        "meshgrid(3 inputs)",
        3,
        lambda a, b, c: ert.meshgrid(a, b, c),
        lambda a, b, c: np.meshgrid(a, b, c),
        ALL,
        (((2,), (3,), (4,)),),
    ),
    _rec(
        "broadcast_arrays",
        2,
        lambda a, b: ert.broadcast_arrays(a, b),
        lambda a, b: list(np.broadcast_arrays(a, b)),
        ALL,
        BINARY_SHAPES,
    ),
    _rec(
        "broadcast_arrays(3)",
        3,
        lambda a, b, c: ert.broadcast_arrays(a, b, c),
        lambda a, b, c: list(np.broadcast_arrays(a, b, c)),
        ALL,
        TERNARY_SHAPES,
    ),
]
for _axis, _shapes in (
    (None, _ANY_SHAPES),
    (0, _ANY_SHAPES[1:]),
    (-1, _ANY_SHAPES[1:]),
    ((0, -1), (((2, 3),), ((2, 0, 3),), ((3, 1, 4),))),
):
    RECORDS.append(
        _rec(
            f"flip(axis={_axis})",
            1,
            lambda x, a=_axis: ert.flip(x, axis=a),
            lambda x, a=_axis: np.flip(x, a),
            ALL,
            _shapes,
        )
    )
for _src, _dst in ((0, -1), ((0, 1), (-1, 0)), (-1, 0)):
    RECORDS.append(
        _rec(
            f"moveaxis({_src}, {_dst})",
            1,
            lambda x, s=_src, d=_dst: ert.moveaxis(x, s, d),
            lambda x, s=_src, d=_dst: np.moveaxis(x, s, d),
            ALL,
            (((2, 3),), ((2, 0, 3),), ((3, 1, 4),)),
        )
    )
for _count, _axis, _shapes in (
    (2, None, _ANY_SHAPES),
    (0, None, (((5,),), ((2, 3),))),
    (3, 0, _ANY_SHAPES[1:]),
    (2, -1, _ANY_SHAPES[1:]),
):
    RECORDS.append(
        _rec(
            f"repeat({_count}, axis={_axis})",
            1,
            lambda x, r=_count, a=_axis: ert.repeat(x, r, axis=a),
            lambda x, r=_count, a=_axis: np.repeat(x, r, axis=a),
            ALL,
            _shapes,
        )
    )
for _axis, _shapes in (
    (None, (((5,), (5,)), ((2, 3), (6,)), ((0,), (0,)), ((2, 3), (1,)))),
    (1, (((2, 3), (3,)), ((3, 1, 4), (1,)), ((2, 0, 3), (0,)))),
    (-1, (((2, 3), (1,)), ((3, 1, 4), (4,)))),
):
    RECORDS.append(
        _rec(
            f"repeat(tensor, axis={_axis})",
            2,
            lambda x, r, a=_axis: ert.repeat(x, r, axis=a),
            lambda x, r, a=_axis: np.repeat(x, r, axis=a),
            ALL,
            _shapes,
            gens=(rand_default, _rand_counts),
            arg_dtypes=lambda d: (d, INT64),
        )
    )
for _shift, _axis, _shapes in (
    (2, None, _ANY_SHAPES),
    (-1, 0, _ANY_SHAPES[1:]),
    (7, -1, _ANY_SHAPES[1:]),
    ((1, -2), (0, 1), (((2, 3),), ((3, 1, 4),), ((2, 0, 3),))),
):
    RECORDS.append(
        _rec(
            f"roll({_shift}, axis={_axis})",
            1,
            lambda x, s=_shift, a=_axis: ert.roll(x, s, axis=a),
            lambda x, s=_shift, a=_axis: np.roll(x, s, axis=a),
            ALL,
            _shapes,
        )
    )
for _reps in ((2,), (2, 1), (1, 2, 2), (0,), ()):
    RECORDS.append(
        _rec(
            f"tile({_reps})",
            1,
            lambda x, r=_reps: ert.tile(x, r),
            lambda x, r=_reps: np.tile(x, r),
            ALL,
            _ANY_SHAPES,
        )
    )
for _axis in (0, -1, 1):
    RECORDS.append(
        _rec(
            f"unstack(axis={_axis})",
            1,
            lambda x, a=_axis: list(ert.unstack(x, axis=a)),
            lambda x, a=_axis: list(np.unstack(x, axis=a)),
            ALL,
            _ND2 if _axis == 1 else _ND1,
        )
    )
for _name in ("cumulative_sum", "cumulative_prod"):
    for _label, _params, _shapes in _CUMULATIVE:
        RECORDS.append(
            _rec(
                f"{_name}({_label})",
                1,
                lambda x, n=_name, p=_params: getattr(ert, n)(x, **p),
                lambda x, n=_name, p=_params: getattr(np, n)(x, **p),
                ALL_REAL if "dtype" in _params else ALL,  # complex -> float64 warns
                _shapes,
                gens=rand_small,
                tol=16,
            )
        )
for _name in ("all", "any"):
    for _axis, _keep, _kind in _AXES:
        RECORDS.append(
            _rec(
                f"{_name}(axis={_axis}, keepdims={_keep})",
                1,
                lambda x, n=_name, a=_axis, k=_keep: getattr(ert, n)(x, axis=a, keepdims=k),
                lambda x, n=_name, a=_axis, k=_keep: getattr(np, n)(x, axis=a, keepdims=k),
                ALL,
                [(s,) for s in _RED_SHAPES[_kind]],
                gens=_rand_ties,
            )
        )
for _n, _axis, _shapes in (
    (1, -1, _ND1),
    (2, 0, _ND1),
    (0, -1, _ND1),
    (5, -1, (((3,),), ((2, 3),))),
):
    RECORDS.append(
        _rec(
            f"diff(n={_n}, axis={_axis})",
            1,
            lambda x, n=_n, a=_axis: ert.diff(x, n=n, axis=a),
            lambda x, n=_n, a=_axis: np.diff(x, n=n, axis=a),
            ALL,
            _shapes,
            gens=rand_small,
        )
    )
RECORDS += [
    _rec(
        "diff(prepend=, append=)",
        3,
        lambda x, p, a: ert.diff(x, prepend=p, append=a),
        lambda x, p, a: np.diff(x, prepend=p, append=a),
        ALL,
        (((2, 3), (2, 1), (2, 2)), ((4,), (1,), (0,)), ((2, 3), (), ())),
        gens=rand_small,
    ),
    _rec(
        "diff(prepend=, axis=0)",
        2,
        lambda x, p: ert.diff(x, axis=0, prepend=p),
        lambda x, p: np.diff(x, axis=0, prepend=p),
        ALL,
        (((2, 3), (1, 3)), ((0, 2), (2, 2))),
        gens=rand_small,
    ),
]
for _axis, _keep, _kind in _AXES:
    RECORDS.append(
        _rec(
            f"count_nonzero(axis={_axis}, keepdims={_keep})",
            1,
            lambda x, a=_axis, k=_keep: ert.count_nonzero(x, axis=a, keepdims=k),
            lambda x, a=_axis, k=_keep: np.asarray(
                np.count_nonzero(x, axis=a, keepdims=k), dtype=np.int64
            ),
            ALL,
            [(s,) for s in _RED_SHAPES[_kind]],
            gens=_rand_ties,
        )
    )
RECORDS += [
    _rec(
        "nonzero",
        1,
        lambda x: list(ert.nonzero(x)),
        lambda x: _as_int64(np.nonzero(x)),
        ALL,
        _ND1,
        gens=_rand_ties,
    ),
    _rec(
        "unique_all",
        1,
        lambda x: list(ert.unique_all(x)),
        lambda x: [_unique_ref(x)[0], *_as_int64(_unique_ref(x)[1:])],
        ALL,
        UNARY_SHAPES,
        gens=_rand_ties,
    ),
    _rec(
        "unique_counts",
        1,
        lambda x: list(ert.unique_counts(x)),
        lambda x: [_unique_ref(x)[0], *_as_int64(_unique_ref(x)[3:])],
        ALL,
        UNARY_SHAPES,
        gens=_rand_ties,
    ),
    _rec(
        "unique_inverse",
        1,
        lambda x: list(ert.unique_inverse(x)),
        lambda x: [_unique_ref(x)[0], *_as_int64(_unique_ref(x)[2:3])],
        ALL,
        UNARY_SHAPES,
        gens=_rand_ties,
    ),
    _rec(
        "unique_values",
        1,
        ert.unique_values,
        lambda x: _unique_ref(x)[0],
        ALL,
        UNARY_SHAPES,
        gens=_rand_ties,
    ),
]
for _side in ("left", "right"):
    RECORDS += [
        _rec(
            f"searchsorted(side={_side})",
            2,
            lambda x1, x2, s=_side: ert.searchsorted(x1, x2, side=s),
            lambda x1, x2, s=_side: np.searchsorted(x1, x2, side=s).astype(np.int64),
            ALL_REAL,
            (((5,), (3,)), ((0,), (2,)), ((4,), (2, 3)), ((3,), ()), ((6,), (0,))),
            gens=(_rand_sorted, _rand_ties),
        ),
        _rec(
            f"searchsorted(scalar, side={_side})",
            1,
            lambda x1, s=_side: ert.searchsorted(x1, 1, side=s),
            lambda x1, s=_side: np.asarray(np.searchsorted(x1, 1, side=s), dtype=np.int64),
            ALL_REAL,
            (((5,),), ((0,),)),
            gens=_rand_sorted,
        ),
        _rec(
            f"searchsorted(sorter=, side={_side})",
            2,
            lambda x1, x2, s=_side: ert.searchsorted(x1, x2, side=s, sorter=ert.argsort(x1)),
            lambda x1, x2, s=_side: np.searchsorted(
                x1, x2, side=s, sorter=np.argsort(x1, kind="stable")
            ).astype(np.int64),
            ALL_REAL,
            (((5,), (3,)), ((0,), (2,))),
            gens=_rand_ties,
        ),
    ]
for _axis, _shapes in ((-1, _ND1), (0, _ND1)):
    for _stable in (True, False):
        RECORDS.append(
            _rec(
                f"sort(axis={_axis}, stable={_stable})",
                1,
                lambda x, a=_axis, s=_stable: ert.sort(x, axis=a, stable=s),
                lambda x, a=_axis: np.sort(x, axis=a),
                ALL_REAL,
                _shapes,
                gens=_rand_ties,
            )
        )
    RECORDS += [
        _rec(
            f"sort(axis={_axis}, descending=True)",
            1,
            lambda x, a=_axis: ert.sort(x, axis=a, descending=True),
            lambda x, a=_axis: np.flip(np.sort(x, axis=a), axis=a),
            ALL_REAL,
            _shapes,
            gens=_rand_ties,
        ),
        _rec(
            f"argsort(axis={_axis})",
            1,
            lambda x, a=_axis: ert.argsort(x, axis=a),
            lambda x, a=_axis: np.argsort(x, axis=a, kind="stable").astype(np.int64),
            ALL_REAL,
            _shapes,
            gens=_rand_ties,
        ),
        _rec(
            f"argsort(axis={_axis}, descending=True)",
            1,
            lambda x, a=_axis: ert.argsort(x, axis=a, descending=True),
            lambda x, a=_axis: _stable_descending(x, a),
            ALL_REAL,
            _shapes,
            gens=_rand_ties,
        ),
    ]


# -- creation ---------------------------------------------------------------------------
@dataclass(frozen=True)
class CreationCase:
    """An op with no tensor inputs and its numpy equivalent."""

    name: str
    ert_fn: Callable[[], Any]
    np_fn: Callable[[], Any]


def _creation_cases() -> list[CreationCase]:
    cases = [
        CreationCase("zeros((2, 3))", lambda: ert.zeros((2, 3)), lambda: np.zeros((2, 3))),
        CreationCase("zeros(4)", lambda: ert.zeros(4), lambda: np.zeros(4)),
        CreationCase("zeros(())", lambda: ert.zeros(()), lambda: np.zeros(())),
        CreationCase("zeros((0, 3))", lambda: ert.zeros((0, 3)), lambda: np.zeros((0, 3))),
        CreationCase(
            "ones((3,), int8)",
            lambda: ert.ones((3,), dtype="int8"),
            lambda: np.ones((3,), dtype="int8"),
        ),
        CreationCase(
            "ones([2, 2], bool)",
            lambda: ert.ones([2, 2], dtype=bool),
            lambda: np.ones([2, 2], bool),
        ),
        CreationCase("empty((2, 0)).shape", lambda: ert.empty((2, 0)), lambda: np.empty((2, 0))),
        CreationCase("full((2, 2), 7)", lambda: ert.full((2, 2), 7), lambda: np.full((2, 2), 7)),
        CreationCase("full((2,), 1.5)", lambda: ert.full((2,), 1.5), lambda: np.full((2,), 1.5)),
        CreationCase("full((2,), True)", lambda: ert.full((2,), True), lambda: np.full((2,), True)),
        CreationCase("full((2,), 1j)", lambda: ert.full((2,), 1j), lambda: np.full((2,), 1j)),
        CreationCase("full((2,), 0)", lambda: ert.full((2,), 0), lambda: np.full((2,), 0)),
        CreationCase("full((), 3)", lambda: ert.full((), 3), lambda: np.full((), 3)),
        CreationCase(
            "full((2,), np.float32(1.5))",
            lambda: ert.full((2,), np.float32(1.5)),
            lambda: np.full((2,), np.float32(1.5)),
        ),
        CreationCase(
            "full((3,), 2.7, int8)",
            lambda: ert.full((3,), 2.7, dtype="int8"),
            lambda: np.full((3,), 2.7, dtype="int8"),
        ),
        CreationCase(
            "full((3,), 5, float32)",
            lambda: ert.full((3,), 5, dtype="float32"),
            lambda: np.full((3,), 5, "float32"),
        ),
        CreationCase("arange(5)", lambda: ert.arange(5), lambda: np.arange(5)),
        CreationCase("arange(0)", lambda: ert.arange(0), lambda: np.arange(0)),
        CreationCase("arange(2, 9, 3)", lambda: ert.arange(2, 9, 3), lambda: np.arange(2, 9, 3)),
        CreationCase(
            "arange(10, 0, -3)", lambda: ert.arange(10, 0, -3), lambda: np.arange(10, 0, -3)
        ),
        CreationCase("arange(5, 2)", lambda: ert.arange(5, 2), lambda: np.arange(5, 2)),
        CreationCase(
            "arange(0, 1, 0.25)", lambda: ert.arange(0, 1, 0.25), lambda: np.arange(0, 1, 0.25)
        ),
        CreationCase(
            "arange(1, 1.3, 0.1)", lambda: ert.arange(1, 1.3, 0.1), lambda: np.arange(1, 1.3, 0.1)
        ),
        CreationCase("arange(2.5)", lambda: ert.arange(2.5), lambda: np.arange(2.5)),
        CreationCase(
            "arange(5, dtype=float32)",
            lambda: ert.arange(5, dtype="float32"),
            lambda: np.arange(5, dtype="float32"),
        ),
        CreationCase(
            "arange(0, 5.5, 1, dtype=int)",
            lambda: ert.arange(0, 5.5, 1, dtype=int),
            lambda: np.arange(0, 5.5, 1, dtype=int),
        ),
        CreationCase(
            "arange(np.int8(5))", lambda: ert.arange(np.int8(5)), lambda: np.arange(np.int8(5))
        ),
        CreationCase(
            "arange(float32 scalars)",
            lambda: ert.arange(np.float32(0), np.float32(1), np.float32(0.25)),
            lambda: np.arange(np.float32(0), np.float32(1), np.float32(0.25)),
        ),
        CreationCase(
            "linspace(0, 1, 5)", lambda: ert.linspace(0, 1, 5), lambda: np.linspace(0, 1, 5)
        ),
        CreationCase("linspace(0, 1)", lambda: ert.linspace(0, 1), lambda: np.linspace(0, 1)),
        CreationCase(
            "linspace(0, 10, 0)", lambda: ert.linspace(0, 10, 0), lambda: np.linspace(0, 10, 0)
        ),
        CreationCase(
            "linspace(0, 10, 1)", lambda: ert.linspace(0, 10, 1), lambda: np.linspace(0, 10, 1)
        ),
        CreationCase(
            "linspace(2, 3, 4, endpoint=False)",
            lambda: ert.linspace(2, 3, 4, endpoint=False),
            lambda: np.linspace(2, 3, 4, endpoint=False),
        ),
        CreationCase(
            "linspace(0, 10, 5, dtype=int32)",
            lambda: ert.linspace(0, 10, 5, dtype="int32"),
            lambda: np.linspace(0, 10, 5, dtype="int32"),
        ),
        CreationCase(
            "linspace(1, -1, 7, dtype=float32)",
            lambda: ert.linspace(1, -1, 7, dtype="float32"),
            lambda: np.linspace(1, -1, 7, dtype="float32"),
        ),
        CreationCase(
            "linspace(float32 scalars)",
            lambda: ert.linspace(np.float32(0), np.float32(1), 5),
            lambda: np.linspace(np.float32(0), np.float32(1), 5),
        ),
        CreationCase(
            "linspace(0, 1j, 3)", lambda: ert.linspace(0, 1j, 3), lambda: np.linspace(0, 1j, 3)
        ),
        CreationCase("eye(3)", lambda: ert.eye(3), lambda: np.eye(3)),
        CreationCase("eye(2, 4)", lambda: ert.eye(2, 4), lambda: np.eye(2, 4)),
        CreationCase("eye(4, 3, k=-1)", lambda: ert.eye(4, 3, k=-1), lambda: np.eye(4, 3, k=-1)),
        CreationCase("eye(3, k=5)", lambda: ert.eye(3, k=5), lambda: np.eye(3, k=5)),
        CreationCase("eye(0)", lambda: ert.eye(0), lambda: np.eye(0)),
        CreationCase(
            "eye(3, dtype=int8)", lambda: ert.eye(3, dtype="int8"), lambda: np.eye(3, dtype="int8")
        ),
        CreationCase(
            "eye(2, 3, 1, bool)",
            lambda: ert.eye(2, 3, k=1, dtype=bool),
            lambda: np.eye(2, 3, 1, bool),
        ),
    ]
    for dtype in ALL:
        base = np.arange(6).reshape(2, 3).astype(dtype)
        cases += [
            CreationCase(
                f"zeros_like({dtype})",
                lambda b=base: ert.zeros_like(ert.asarray(b)),
                lambda b=base: np.zeros_like(b),
            ),
            CreationCase(
                f"ones_like({dtype})",
                lambda b=base: ert.ones_like(ert.asarray(b)),
                lambda b=base: np.ones_like(b),
            ),
            CreationCase(
                f"full_like({dtype}, 1)",
                lambda b=base: ert.full_like(ert.asarray(b), 1),
                lambda b=base: np.full_like(b, 1),
            ),
            CreationCase(
                f"zeros({dtype})",
                lambda d=dtype: ert.zeros((2, 1), dtype=d),
                lambda d=dtype: np.zeros((2, 1), dtype=d),
            ),
            CreationCase(
                f"full({dtype})",
                lambda d=dtype: ert.full((3,), 1, dtype=d),
                lambda d=dtype: np.full((3,), 1, dtype=d),
            ),
            CreationCase(
                f"asarray(ndarray {dtype})",
                lambda b=base: ert.asarray(b),
                lambda b=base: np.asarray(b),
            ),
        ]
    cases += [
        CreationCase(
            "zeros_like(t, dtype=int8)",
            lambda: ert.zeros_like(ert.ones((2, 2)), dtype="int8"),
            lambda: np.zeros_like(np.ones((2, 2)), dtype="int8"),
        ),
        CreationCase(
            "ones_like(t, float32)",
            lambda: ert.ones_like(ert.ones((2,), dtype="int8"), dtype="float32"),
            lambda: np.ones_like(np.ones((2,), dtype="int8"), "float32"),
        ),
        CreationCase(
            "full_like(int t, 2.7)",
            lambda: ert.full_like(ert.asarray([1, 2]), 2.7),
            lambda: np.full_like(np.array([1, 2]), 2.7),
        ),
        CreationCase(
            "full_like(t, 2.5, dtype=float32)",
            lambda: ert.full_like(ert.asarray([1, 2]), 2.5, dtype="float32"),
            lambda: np.full_like(np.array([1, 2]), 2.5, dtype="float32"),
        ),
        CreationCase(
            "empty_like(t).shape",
            lambda: ert.empty_like(ert.ones((2, 0, 3), dtype="uint8")),
            lambda: np.empty_like(np.ones((2, 0, 3), dtype="uint8")),
        ),
        CreationCase(
            "asarray(list)",
            lambda: ert.asarray([[1, 2], [3, 4]]),
            lambda: np.asarray([[1, 2], [3, 4]]),
        ),
        CreationCase(
            "asarray(floats)", lambda: ert.asarray([1.5, 2]), lambda: np.asarray([1.5, 2])
        ),
        CreationCase(
            "asarray(bools)", lambda: ert.asarray([True, False]), lambda: np.asarray([True, False])
        ),
        CreationCase("asarray(3)", lambda: ert.asarray(3), lambda: np.asarray(3)),
        CreationCase("asarray(2.5)", lambda: ert.asarray(2.5), lambda: np.asarray(2.5)),
        CreationCase("asarray(1+2j)", lambda: ert.asarray(1 + 2j), lambda: np.asarray(1 + 2j)),
        CreationCase("asarray([])", lambda: ert.asarray([]), lambda: np.asarray([])),
        CreationCase(
            "asarray(list, dtype=uint8)",
            lambda: ert.asarray([[1, 2], [3, 4]], dtype="uint8"),
            lambda: np.asarray([[1, 2], [3, 4]], dtype="uint8"),
        ),
        CreationCase(
            "asarray(np.float32(2))",
            lambda: ert.asarray(np.float32(2)),
            lambda: np.asarray(np.float32(2)),
        ),
        CreationCase(
            "asarray(ndarray, dtype=float32)",
            lambda: ert.asarray(np.arange(4), dtype=np.float32),
            lambda: np.asarray(np.arange(4), dtype=np.float32),
        ),
        CreationCase(
            "asarray(ndarray, copy=True)",
            lambda: ert.asarray(np.arange(4), copy=True),
            lambda: np.array(np.arange(4), copy=True),
        ),
        CreationCase(
            "asarray(non-contiguous view)",
            lambda: ert.asarray(np.arange(12).reshape(3, 4)[::2, ::-1]),
            lambda: np.arange(12).reshape(3, 4)[::2, ::-1],
        ),
        CreationCase(
            "asarray(list of tensors)",
            lambda: ert.asarray([ert.ones(2), ert.zeros(2)]),
            lambda: np.asarray([np.ones(2), np.zeros(2)]),
        ),
    ]
    return cases


CREATION_CASES = _creation_cases()
