"""Every built-in op, defined once each, and the public registry for new ones."""

from __future__ import annotations

from . import random, tensor_methods  # noqa: F401 - installs Tensor's operators
from .creation import (
    arange,
    asarray,
    empty,
    empty_like,
    eye,
    full,
    full_like,
    linspace,
    ones,
    ones_like,
    zeros,
    zeros_like,
)
from .elementwise import UFUNC_OPS, clip, gelu, relu, round, scaled_cost, sigmoid, where
from .linalg import matmul, tensordot
from .manipulation import (
    astype,
    broadcast_to,
    concat,
    expand_dims,
    getitem,
    permute_dims,
    reshape,
    split,
    squeeze,
    stack,
    take,
    transpose,
)
from .nn import log_softmax, softmax
from .reduction import argmax, argmin, max, mean, min, prod, std, sum, var
from .registry import (
    GENERIC,
    Op,
    define_op,
    elementwise_cost,
    get_op,
    registered_ops,
    seal_builtin_ops,
)

seal_builtin_ops()

abs = UFUNC_OPS["abs"]
negative = neg = UFUNC_OPS["negative"]
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
add = UFUNC_OPS["add"]
subtract = UFUNC_OPS["subtract"]
multiply = UFUNC_OPS["multiply"]
divide = UFUNC_OPS["divide"]
floor_divide = UFUNC_OPS["floor_divide"]
remainder = UFUNC_OPS["remainder"]
power = pow = UFUNC_OPS["power"]
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
permute = permute_dims

__all__ = [
    "GENERIC",
    "Op",
    "abs",
    "add",
    "arange",
    "argmax",
    "argmin",
    "asarray",
    "astype",
    "broadcast_to",
    "ceil",
    "clip",
    "concat",
    "cos",
    "define_op",
    "divide",
    "elementwise_cost",
    "empty",
    "empty_like",
    "equal",
    "exp",
    "expand_dims",
    "eye",
    "floor",
    "floor_divide",
    "full",
    "full_like",
    "gelu",
    "get_op",
    "getitem",
    "greater",
    "greater_equal",
    "less",
    "less_equal",
    "linspace",
    "log",
    "log_softmax",
    "logical_and",
    "logical_not",
    "logical_or",
    "logical_xor",
    "matmul",
    "max",
    "maximum",
    "mean",
    "min",
    "minimum",
    "multiply",
    "neg",
    "negative",
    "not_equal",
    "ones",
    "ones_like",
    "permute",
    "permute_dims",
    "positive",
    "pow",
    "power",
    "prod",
    "random",
    "registered_ops",
    "relu",
    "remainder",
    "reshape",
    "round",
    "scaled_cost",
    "sigmoid",
    "sign",
    "sin",
    "softmax",
    "split",
    "sqrt",
    "square",
    "squeeze",
    "stack",
    "std",
    "subtract",
    "sum",
    "take",
    "tanh",
    "tensordot",
    "transpose",
    "var",
    "where",
    "zeros",
    "zeros_like",
]
