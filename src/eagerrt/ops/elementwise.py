"""Elementwise ops: numpy's ufuncs, activations, ``where`` and ``clip``.

Most are defined from one table of ``{name: ufunc}``; their dtype rule asks the
ufunc itself (``resolve_dtypes``), so results match numpy's promotion exactly,
with Python scalars kept weak as in NEP 50.

>>> import eagerrt as ert
>>> (ert.asarray([1, 2, 3], dtype="int8") * 2).dtype
dtype('int8')
>>> ert.relu(ert.asarray([-1.0, 2.0])).numpy()
array([0., 2.])
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._core import DTypeError, config
from ..tensor import Tensor
from ._rules import RuleOut, as_float, broadcast_shapes, dtype_key, ufunc_dtype
from .erf_rational import ERF_CLAMP, INV_SQRT2, erf_rational_inside
from .registry import GENERIC, Op, define_op

__all__ = [  # written out for type checkers; test_layers checks it lists every op
    "abs",
    "acos",
    "acosh",
    "add",
    "asin",
    "asinh",
    "atan",
    "atan2",
    "atanh",
    "bitwise_and",
    "bitwise_invert",
    "bitwise_left_shift",
    "bitwise_or",
    "bitwise_right_shift",
    "bitwise_xor",
    "ceil",
    "clip",
    "conj",
    "copysign",
    "cos",
    "cosh",
    "divide",
    "equal",
    "exp",
    "expm1",
    "floor",
    "floor_divide",
    "gelu",
    "greater",
    "greater_equal",
    "hypot",
    "imag",
    "isfinite",
    "isinf",
    "isnan",
    "less",
    "less_equal",
    "log",
    "log10",
    "log1p",
    "log2",
    "logaddexp",
    "logical_and",
    "logical_not",
    "logical_or",
    "logical_xor",
    "maximum",
    "minimum",
    "multiply",
    "neg",
    "negative",
    "nextafter",
    "not_equal",
    "positive",
    "pow",
    "power",
    "real",
    "reciprocal",
    "relu",
    "remainder",
    "round",
    "scaled_cost",
    "sigmoid",
    "sign",
    "signbit",
    "sin",
    "sinh",
    "sqrt",
    "square",
    "subtract",
    "tan",
    "tanh",
    "trunc",
    "where",
]


def scaled_cost(factor: float) -> Any:
    """An elementwise cost whose per-element work is ``factor`` times a plain add."""

    def cost(shape: tuple[int, ...], dtype: np.dtype[Any], /, *args: Any, **static: Any) -> float:
        return config.op_overhead_ns + math.prod(shape) * config.ns_per_element * factor

    return cost


def _shape_of(arg: Any) -> tuple[int, ...]:
    return arg.shape if type(arg) is Tensor else ()


_ACCEPT_ANY_INT = frozenset(
    {
        "equal",
        "not_equal",
        "less",
        "less_equal",
        "greater",
        "greater_equal",
        "logical_and",
        "logical_or",
        "logical_xor",
    }
)


def _check_int_fits(scalar: Any, other: Any) -> None:
    """numpy (NEP 50) refuses a Python int that its integer operand can't hold."""
    if type(scalar) is int and type(other) is Tensor and other.dtype.kind in "iu":
        info = np.iinfo(other.dtype)
        if not info.min <= scalar <= info.max:
            raise OverflowError(f"Python integer {scalar} out of bounds for {other.dtype}")


def _ufunc_op(name: str, ufunc: np.ufunc, factor: float) -> Op:
    if ufunc.nin == 1:

        def rule(x: Any) -> RuleOut:
            return _shape_of(x), ufunc_dtype(ufunc, x)

    else:
        # Comparisons and logical ops accept any Python int (numpy compares values).
        strict = name not in _ACCEPT_ANY_INT

        def rule(x: Any, y: Any) -> RuleOut:  # type: ignore[misc]
            if strict:
                _check_int_fits(x, y)
                _check_int_fits(y, x)
            return broadcast_shapes(_shape_of(x), _shape_of(y)), ufunc_dtype(ufunc, x, y)

    op = define_op(
        name,
        rule,
        cost=scaled_cost(factor),
        doc=f"Elementwise ``numpy.{ufunc.__name__}``, asynchronously.",
        operands=ufunc.nin,
        weak_scalars=True,
    )
    op.scalar_types_only = ufunc.nin == 2
    op.register_kernel(GENERIC, ufunc)
    return op


# name -> (ufunc, cost relative to an add); transcendental functions cost more.
UNARY_UFUNCS: dict[str, tuple[np.ufunc, float]] = {
    "abs": (np.absolute, 1),
    "negative": (np.negative, 1),
    "positive": (np.positive, 1),
    "exp": (np.exp, 4),
    "log": (np.log, 4),
    "sqrt": (np.sqrt, 2),
    "sin": (np.sin, 8),
    "cos": (np.cos, 8),
    "tanh": (np.tanh, 8),
    "floor": (np.floor, 1),
    "ceil": (np.ceil, 1),
    "sign": (np.sign, 1),
    "square": (np.square, 1),
    "logical_not": (np.logical_not, 1),
    "acos": (np.arccos, 8),
    "acosh": (np.arccosh, 8),
    "asin": (np.arcsin, 8),
    "asinh": (np.arcsinh, 8),
    "atan": (np.arctan, 8),
    "atanh": (np.arctanh, 8),
    "bitwise_invert": (np.invert, 1),
    "conj": (np.conjugate, 1),
    "cosh": (np.cosh, 8),
    "expm1": (np.expm1, 4),
    "isfinite": (np.isfinite, 1),
    "isinf": (np.isinf, 1),
    "isnan": (np.isnan, 1),
    "log1p": (np.log1p, 4),
    "log2": (np.log2, 4),
    "log10": (np.log10, 4),
    "signbit": (np.signbit, 1),
    "sinh": (np.sinh, 8),
    "tan": (np.tan, 8),
    "trunc": (np.trunc, 1),
}
BINARY_UFUNCS: dict[str, tuple[np.ufunc, float]] = {
    "add": (np.add, 1),
    "subtract": (np.subtract, 1),
    "multiply": (np.multiply, 1),
    "divide": (np.divide, 2),
    "floor_divide": (np.floor_divide, 4),
    "remainder": (np.remainder, 4),
    "power": (np.power, 8),
    "maximum": (np.maximum, 1),
    "minimum": (np.minimum, 1),
    "equal": (np.equal, 1),
    "not_equal": (np.not_equal, 1),
    "less": (np.less, 1),
    "less_equal": (np.less_equal, 1),
    "greater": (np.greater, 1),
    "greater_equal": (np.greater_equal, 1),
    "logical_and": (np.logical_and, 1),
    "logical_or": (np.logical_or, 1),
    "logical_xor": (np.logical_xor, 1),
    "atan2": (np.arctan2, 8),
    "bitwise_and": (np.bitwise_and, 1),
    "bitwise_left_shift": (np.left_shift, 1),
    "bitwise_or": (np.bitwise_or, 1),
    "bitwise_right_shift": (np.right_shift, 1),
    "bitwise_xor": (np.bitwise_xor, 1),
    "copysign": (np.copysign, 1),
    "hypot": (np.hypot, 4),
    "logaddexp": (np.logaddexp, 8),
    "nextafter": (np.nextafter, 2),
}

UFUNC_OPS: dict[str, Op] = {
    name: _ufunc_op(name, ufunc, factor)
    for name, (ufunc, factor) in {**UNARY_UFUNCS, **BINARY_UFUNCS}.items()
}
# Each ufunc op by name, written out so type checkers and IDEs see them.
abs = UFUNC_OPS["abs"]
negative = UFUNC_OPS["negative"]
positive = UFUNC_OPS["positive"]
exp = UFUNC_OPS["exp"]
log = UFUNC_OPS["log"]
sqrt = UFUNC_OPS["sqrt"]
sin = UFUNC_OPS["sin"]
cos = UFUNC_OPS["cos"]
tanh = UFUNC_OPS["tanh"]
floor = UFUNC_OPS["floor"]
ceil = UFUNC_OPS["ceil"]
sign = UFUNC_OPS["sign"]
square = UFUNC_OPS["square"]
logical_not = UFUNC_OPS["logical_not"]
acos = UFUNC_OPS["acos"]
acosh = UFUNC_OPS["acosh"]
asin = UFUNC_OPS["asin"]
asinh = UFUNC_OPS["asinh"]
atan = UFUNC_OPS["atan"]
atanh = UFUNC_OPS["atanh"]
bitwise_invert = UFUNC_OPS["bitwise_invert"]
conj = UFUNC_OPS["conj"]
cosh = UFUNC_OPS["cosh"]
expm1 = UFUNC_OPS["expm1"]
isfinite = UFUNC_OPS["isfinite"]
isinf = UFUNC_OPS["isinf"]
isnan = UFUNC_OPS["isnan"]
log1p = UFUNC_OPS["log1p"]
log2 = UFUNC_OPS["log2"]
log10 = UFUNC_OPS["log10"]
signbit = UFUNC_OPS["signbit"]
sinh = UFUNC_OPS["sinh"]
tan = UFUNC_OPS["tan"]
trunc = UFUNC_OPS["trunc"]
add = UFUNC_OPS["add"]
subtract = UFUNC_OPS["subtract"]
multiply = UFUNC_OPS["multiply"]
divide = UFUNC_OPS["divide"]
floor_divide = UFUNC_OPS["floor_divide"]
remainder = UFUNC_OPS["remainder"]
power = UFUNC_OPS["power"]
maximum = UFUNC_OPS["maximum"]
minimum = UFUNC_OPS["minimum"]
equal = UFUNC_OPS["equal"]
not_equal = UFUNC_OPS["not_equal"]
less = UFUNC_OPS["less"]
less_equal = UFUNC_OPS["less_equal"]
greater = UFUNC_OPS["greater"]
greater_equal = UFUNC_OPS["greater_equal"]
logical_and = UFUNC_OPS["logical_and"]
logical_or = UFUNC_OPS["logical_or"]
logical_xor = UFUNC_OPS["logical_xor"]
atan2 = UFUNC_OPS["atan2"]
bitwise_and = UFUNC_OPS["bitwise_and"]
bitwise_left_shift = UFUNC_OPS["bitwise_left_shift"]
bitwise_or = UFUNC_OPS["bitwise_or"]
bitwise_right_shift = UFUNC_OPS["bitwise_right_shift"]
bitwise_xor = UFUNC_OPS["bitwise_xor"]
copysign = UFUNC_OPS["copysign"]
hypot = UFUNC_OPS["hypot"]
logaddexp = UFUNC_OPS["logaddexp"]
nextafter = UFUNC_OPS["nextafter"]
# Other names: numpy's, PyTorch's and the Array API's spellings.
neg = negative
pow = power


def _real_part_rule(x: Any) -> RuleOut:
    dtype = x.dtype if type(x) is Tensor else np.result_type(x)
    return _shape_of(x), np.empty(0, dtype).real.dtype


real = define_op(
    "real",
    _real_part_rule,
    operands=1,
    weak_scalars=True,
    doc="The real part of each element (real input: itself).",
)
real.register_kernel(GENERIC, np.real)
imag = define_op(
    "imag",
    _real_part_rule,
    operands=1,
    weak_scalars=True,
    doc="The imaginary part of each element (real input: zeros).",
)
imag.register_kernel(GENERIC, lambda x: np.imag(x) if np.iscomplexobj(x) else np.zeros_like(x))


def _reciprocal_rule(x: Any) -> RuleOut:
    # The Array API's reciprocal is 1 / x: integers become floats (numpy's
    # ufunc would do integer division).
    return _shape_of(x), ufunc_dtype(np.divide, 1.0, x)


reciprocal = define_op(
    "reciprocal", _reciprocal_rule, operands=1, weak_scalars=True, doc="``1 / x``."
)
reciprocal.register_kernel(GENERIC, lambda x: np.divide(1.0, x))


# -- activations ---------------------------------------------------------------
def _float_rule(x: Any) -> RuleOut:
    """Shape kept; dtype as numpy's exp would give (ints become floats)."""
    return _shape_of(x), ufunc_dtype(np.exp, x)


sigmoid = define_op(
    "sigmoid",
    _float_rule,
    cost=scaled_cost(8),
    operands=1,
    weak_scalars=True,
    doc="Logistic sigmoid ``1 / (1 + exp(-x))``, computed stably as ``(1 + tanh(x/2)) / 2``.",
)


@sigmoid.kernel()
def _sigmoid(x: Any) -> Any:
    x = as_float(x)
    out = np.tanh(x * 0.5)
    out += 1
    out *= 0.5
    return out


relu = define_op(
    "relu",
    lambda x: (_shape_of(x), ufunc_dtype(np.maximum, x, 0)),
    operands=1,
    weak_scalars=True,
    doc="Rectified linear unit ``maximum(x, 0)``.",
)
relu.register_kernel(GENERIC, lambda x: np.maximum(x, 0))

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _gelu_rule(x: Any, approximate: str = "none") -> RuleOut:
    if approximate not in ("none", "tanh"):
        raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
    shape, dtype = _float_rule(x)
    if dtype.kind != "f":
        raise TypeError(f"gelu is defined for real numbers, not {dtype}")
    return shape, dtype


gelu = define_op(
    "gelu",
    _gelu_rule,
    cost=scaled_cost(12),
    operands=1,
    doc="GELU ``x * Phi(x)``; ``approximate='tanh'`` uses the tanh formula.",
)


@gelu.kernel()
def _gelu(x: Any, approximate: str = "none") -> Any:
    x = as_float(x)
    if approximate == "tanh":
        inner = np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x**3))
        return 0.5 * x * (1 + inner)
    return 0.5 * x * (1 + _erf(x * x.dtype.type(INV_SQRT2)))


def _erf(z: Any) -> Any:
    """erf in numpy-API calls (numpy has none of its own): float64 through
    ``math.erf``, narrower floats through the rational form of
    :mod:`.erf_rational`, as the CPU backend's kernel computes them."""
    if z.dtype == np.float64:
        return np.frompyfunc(math.erf, 1, 1)(z).astype(np.float64)
    inside = erf_rational_inside(z)
    return np.where(np.abs(z) < ERF_CLAMP, inside, np.sign(z)).astype(z.dtype, copy=False)


# -- selection -------------------------------------------------------------------
def _meta_dtype(fn: Any, *args: Any) -> np.dtype[Any]:
    """The dtype numpy's ``fn`` gives for these operands, from empty stand-ins."""
    key = (fn, *map(dtype_key, args))
    out = _meta_cache.get(key)
    if out is None:
        stand_ins = [
            np.empty((0,), a.dtype) if type(a) is Tensor else (None if a is None else type(a)(0))
            for a in args
        ]
        try:
            out = np.asarray(fn(*stand_ins)).dtype
        except TypeError as exc:
            raise DTypeError(str(exc)) from None
        _meta_cache[key] = out
    return out


_meta_cache: dict[tuple[Any, ...], np.dtype[Any]] = {}

where = define_op(
    "where",
    lambda cond, x, y: (
        broadcast_shapes(_shape_of(cond), _shape_of(x), _shape_of(y)),
        _meta_dtype(np.where, True, x, y),
    ),
    operands=3,
    weak_scalars=True,
    doc="Elements of ``x`` where ``cond`` is true, else of ``y`` (broadcast).",
)
where.register_kernel(GENERIC, np.where)


def _clip_rule(x: Any, lo: Any, hi: Any) -> RuleOut:
    shape = broadcast_shapes(_shape_of(x), _shape_of(lo), _shape_of(hi))
    return shape, _meta_dtype(np.clip, x, lo, hi)


_clip_op = define_op(
    "clip", _clip_rule, operands=3, weak_scalars=True, doc="Limit values to ``[min, max]``."
)
_clip_op.register_kernel(GENERIC, np.clip)


def clip(x: Any, /, min: Any = None, max: Any = None) -> Tensor:
    """Limit values to ``[min, max]`` (either bound may be None), as ``numpy.clip``.

    >>> import eagerrt as ert
    >>> ert.clip(ert.asarray([-2.0, 0.5, 3.0]), 0.0, 1.0).numpy()
    array([0. , 0.5, 1. ])
    """
    if min is None and max is None:  # the Array API's rule: the values unchanged
        return UFUNC_OPS["positive"](x)
    if min is None:  # numpy's own clip does the same
        return UFUNC_OPS["minimum"](x, max)
    if max is None:
        return UFUNC_OPS["maximum"](x, min)
    return _clip_op(x, min, max)


def _round_rule(x: Any, decimals: int = 0) -> RuleOut:
    if not isinstance(decimals, (int, np.integer)):
        raise TypeError(f"decimals must be an int, got {type(decimals).__name__}")
    key = (x.dtype, decimals == 0)
    dtype = _round_dtypes.get(key)
    if dtype is None:  # numpy's dtype (bool rounds to float16) and its errors
        dtype = _round_dtypes[key] = np.round(np.empty(0, x.dtype), int(decimals)).dtype
    return _shape_of(x), dtype


_round_dtypes: dict[tuple[Any, bool], np.dtype[Any]] = {}


round = define_op(
    "round",
    _round_rule,
    operands=1,
    doc="Round half to even to ``decimals`` places, as ``numpy.round``.",
)
round.register_kernel(GENERIC, lambda x, decimals=0: np.round(x, decimals))
