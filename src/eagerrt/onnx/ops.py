"""The ONNX op table: each supported ONNX op type, the attributes it accepts and
how it runs, written once for two array namespaces.

A handler is ``fn(xp, node, *inputs) -> output(s)``. ``xp`` is ``numpy`` when
every input is known when the graph is traced (initializers, constants, shapes:
see :mod:`eagerrt.onnx.interpreter`) and ``eagerrt`` otherwise, so one
definition serves both shape arithmetic at trace time and the model's real work.
Handlers marked ``numpy=False`` always get ``eagerrt`` (their ops have no numpy
twin); inputs listed in ``static`` must be known at trace time (shapes, axes)
and always arrive as numpy arrays.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import eagerrt as ert

from .._core import ArgumentError, UsageError
from .erf import erf
from .graph import Node, _dtype

__all__ = ["REWRITES", "SPECS", "OpSpec", "UnsupportedError", "supported_ops"]


class UnsupportedError(UsageError, NotImplementedError):
    """An ONNX model uses an op, attribute or input eagerrt.onnx does not support
    (raised by :func:`eagerrt.onnx.load`, naming the node)."""


Handler = Callable[..., Any]


@dataclass(frozen=True)
class OpSpec:
    """How one ONNX op type runs."""

    op_type: str
    fn: Handler
    attrs: frozenset[str]
    inputs: tuple[int, int]  # how many inputs, at least and at most
    outputs: int  # outputs it computes (later ones must be unused)
    static: frozenset[int]  # inputs needed at trace time
    numpy: bool  # can run on numpy when every input is known
    check: Callable[[Node], object] | None


#: ONNX op type -> spec.
SPECS: dict[str, OpSpec] = {}
#: Op types only the importer's own rewrites make (:mod:`eagerrt.onnx.fusion`).
REWRITES: dict[str, OpSpec] = {}


def supported_ops() -> list[str]:
    """The ONNX op types eagerrt.onnx runs, sorted.

    >>> from eagerrt.onnx import supported_ops
    >>> {"Conv", "MatMul", "LayerNormalization"} <= set(supported_ops())
    True
    """
    return sorted(SPECS)


def _op(
    *op_types: str,
    attrs: Sequence[str] = (),
    inputs: tuple[int, int] = (1, 1),
    outputs: int = 1,
    static: Sequence[int] = (),
    numpy: bool = True,
    check: Callable[[Node], object] | None = None,
    table: dict[str, OpSpec] = SPECS,
) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        for op_type in op_types:
            table[op_type] = OpSpec(
                op_type, fn, frozenset(attrs), inputs, outputs, frozenset(static), numpy, check
            )
        return fn

    return register


def _refuse(node: Node, what: str, error: type[Exception] = UnsupportedError) -> Exception:
    return error(f"{node.describe()}: {what}")


def _one_of(name: str, allowed: Sequence[Any], default: Any) -> Callable[[Node], object]:
    def check(node: Node) -> None:
        value = node.attr(name, default)
        if value not in allowed:
            raise _refuse(node, f"{name}={value!r} is not supported (supported: {list(allowed)})")

    return check


def _checks(*checks: Callable[[Node], object]) -> Callable[[Node], object]:
    def check(node: Node) -> None:
        for c in checks:
            c(node)

    return check


def _ints(values: Any) -> list[int]:
    return [int(v) for v in np.asarray(values).reshape(-1)]


def _astype(xp: Any, x: Any, dtype: np.dtype[Any]) -> Any:
    if xp is np:
        return np.asarray(x).astype(dtype)
    return ert.astype(x, dtype)


def _axis(axis: int, ndim: int, node: Node) -> int:
    if not -ndim <= axis < max(ndim, 1):
        raise _refuse(node, f"axis {axis} is out of range for rank {ndim}", ArgumentError)
    return axis % max(ndim, 1)


# -- elementwise -------------------------------------------------------------------------
_UNARY = {
    "Abs": "abs", "Neg": "negative", "Exp": "exp", "Log": "log", "Sqrt": "sqrt",
    "Sin": "sin", "Cos": "cos", "Tan": "tan", "Tanh": "tanh", "Sinh": "sinh", "Cosh": "cosh",
    "Asin": "asin", "Acos": "acos", "Atan": "atan", "Floor": "floor", "Ceil": "ceil",
    "Sign": "sign", "Round": "round", "IsNaN": "isnan", "Not": "logical_not",
}  # fmt: skip
_BINARY = {
    "Add": "add", "Sub": "subtract", "Mul": "multiply", "MatMul": "matmul",
    "Equal": "equal", "Less": "less", "LessOrEqual": "less_equal", "Greater": "greater",
    "GreaterOrEqual": "greater_equal", "And": "logical_and", "Or": "logical_or",
    "Xor": "logical_xor",
}  # fmt: skip


def _xp(name: str) -> Handler:
    """A handler calling ``xp.<name>`` on the node's inputs."""

    def run(xp: Any, node: Node, *args: Any) -> Any:
        return getattr(xp, name)(*args)

    return run


for _type, _name in _UNARY.items():
    _op(_type)(_xp(_name))
for _type, _name in _BINARY.items():
    _op(_type, inputs=(2, 2))(_xp(_name))
_op("Where", inputs=(3, 3))(_xp("where"))
_op("Sigmoid", numpy=False)(_xp("sigmoid"))
_op("Softplus", numpy=False)(_xp("softplus"))


@_op("Reciprocal")
def _reciprocal(xp: Any, node: Node, x: Any) -> Any:
    return np.divide(1, x).astype(x.dtype) if xp is np else ert.reciprocal(x)


@_op("Div", inputs=(2, 2))
def _div(xp: Any, node: Node, a: Any, b: Any) -> Any:
    if a.dtype.kind not in "iu":
        return xp.divide(a, b)
    # ONNX's integer division truncates toward zero; floor_divide rounds down.
    q = xp.floor_divide(a, b)
    if a.dtype.kind == "u":
        return q
    inexact = xp.not_equal(xp.subtract(a, xp.multiply(q, b)), 0)
    signs_differ = xp.not_equal(xp.less(a, 0), xp.less(b, 0))
    return xp.where(xp.logical_and(inexact, signs_differ), xp.add(q, 1), q)


@_op("Pow", inputs=(2, 2))
def _pow(xp: Any, node: Node, a: Any, b: Any) -> Any:
    if b.dtype != a.dtype:  # ONNX: the exponent may have another type; the base's wins
        b = _astype(xp, b, a.dtype)
    return xp.pow(a, b)


@_op("Mod", attrs=["fmod"], inputs=(2, 2))
def _mod(xp: Any, node: Node, a: Any, b: Any) -> Any:
    r = xp.remainder(a, b)  # the divisor's sign, as fmod=0 asks
    if not node.attr("fmod", 0):
        return r
    # fmod=1: C's fmod, the dividend's sign.
    wrong_sign = xp.logical_and(xp.not_equal(r, 0), xp.not_equal(xp.less(r, 0), xp.less(a, 0)))
    return xp.where(wrong_sign, xp.subtract(r, b), r)


@_op("Relu")
def _relu(xp: Any, node: Node, x: Any) -> Any:
    return np.maximum(x, np.zeros((), x.dtype)) if xp is np else ert.relu(x)


@_op("Erf", numpy=False)
def _erf(xp: Any, node: Node, x: Any) -> Any:
    return erf(x)


@_op(
    "Gelu",
    attrs=["approximate"],
    numpy=False,
    check=_one_of("approximate", ["none", "tanh"], "none"),
)
def _gelu(xp: Any, node: Node, x: Any) -> Any:
    return ert.gelu(x, approximate=node.attr("approximate", "none"))


@_op("LeakyRelu", attrs=["alpha"])
def _leaky_relu(xp: Any, node: Node, x: Any) -> Any:
    return xp.where(xp.greater_equal(x, 0), x, xp.multiply(x, float(node.attr("alpha", 0.01))))


@_op("PRelu", inputs=(2, 2))
def _prelu(xp: Any, node: Node, x: Any, slope: Any) -> Any:
    return xp.where(xp.less(x, 0), xp.multiply(x, slope), x)


def _hard_sigmoid_of(xp: Any, x: Any, alpha: float, beta: float) -> Any:
    """``max(0, min(1, alpha * x + beta))`` in ``x``'s dtype."""
    y = xp.add(xp.multiply(x, alpha), beta)
    return xp.minimum(xp.maximum(y, 0.0), 1.0)


@_op("HardSigmoid", attrs=["alpha", "beta"])
def _hard_sigmoid(xp: Any, node: Node, x: Any) -> Any:
    return _hard_sigmoid_of(xp, x, float(node.attr("alpha", 0.2)), float(node.attr("beta", 0.5)))


@_op("HardSwish")
def _hard_swish(xp: Any, node: Node, x: Any) -> Any:
    return xp.multiply(x, _hard_sigmoid_of(xp, x, 1.0 / 6.0, 0.5))


@_op("Clip", attrs=["min", "max"], inputs=(1, 3))
def _clip(xp: Any, node: Node, x: Any, lo: Any = None, hi: Any = None) -> Any:
    if node.opset < 11:  # bounds were attributes
        lo, hi = (
            None if node.attr(k) is None else np.asarray(node.attr(k), x.dtype)
            for k in ("min", "max")
        )
    if lo is not None:
        x = xp.maximum(x, lo)
    if hi is not None:
        x = xp.minimum(x, hi)
    return x


def _variadic(name: str) -> Handler:
    def run(xp: Any, node: Node, *xs: Any) -> Any:
        out = xs[0]
        for x in xs[1:]:
            out = getattr(xp, name)(out, x)
        return out

    return run


_op("Max", inputs=(1, 1 << 16))(_variadic("maximum"))
_op("Min", inputs=(1, 1 << 16))(_variadic("minimum"))
_op("Sum", inputs=(1, 1 << 16))(_variadic("add"))


@_op("Mean", inputs=(1, 1 << 16))
def _mean(xp: Any, node: Node, *xs: Any) -> Any:
    total = _variadic("add")(xp, node, *xs)
    return xp.divide(total, np.asarray(len(xs), total.dtype))


@_op("Cast", attrs=["to", "saturate"])
def _cast(xp: Any, node: Node, x: Any) -> Any:
    return _astype(xp, x, _dtype(node.attr("to"), f"{node.describe()}'s 'to'"))


@_op("CastLike", attrs=["saturate"], inputs=(2, 2))
def _cast_like(xp: Any, node: Node, x: Any, like: Any) -> Any:
    return _astype(xp, x, like.dtype)


@_op("Identity")
def _identity(xp: Any, node: Node, x: Any) -> Any:
    return x


@_op("Dropout", attrs=["ratio", "seed"], inputs=(1, 3), static=[1, 2])
def _dropout(xp: Any, node: Node, x: Any, ratio: Any = None, training: Any = None) -> Any:
    if training is not None and bool(np.asarray(training)):
        raise _refuse(node, "dropout in training mode is not supported (inference only)")
    return x


# -- shapes, computed at trace time -----------------------------------------------------------
@_op("Shape", attrs=["start", "end"])
def _shape(xp: Any, node: Node, x: Any) -> Any:
    start, end = node.attr("start", 0), node.attr("end")
    return np.array(x.shape[start:end], dtype=np.int64)


@_op("Size")
def _size(xp: Any, node: Node, x: Any) -> Any:
    return np.array(math.prod(x.shape), dtype=np.int64)


def _value_tensor(node: Node) -> np.ndarray:
    if "value" in node.attrs:
        return np.asarray(node.attrs["value"])
    for name in ("value_float", "value_floats", "value_int", "value_ints"):
        if name in node.attrs:
            return np.asarray(node.attrs[name], np.float32 if "float" in name else np.int64)
    raise _refuse(
        node,
        f"needs one of the attributes value, value_float(s), value_int(s); got {sorted(node.attrs)}",
    )


@_op(
    "Constant",
    attrs=["value", "value_float", "value_floats", "value_int", "value_ints"],
    inputs=(0, 0),
    check=_value_tensor,
)
def _constant(xp: Any, node: Node) -> Any:
    return _value_tensor(node)


@_op("ConstantOfShape", attrs=["value"], static=[0])
def _constant_of_shape(xp: Any, node: Node, shape: Any) -> Any:
    value = np.asarray(node.attr("value", np.zeros(1, np.float32)))
    return np.full(tuple(_ints(shape)), value.reshape(-1)[0], dtype=value.dtype)


@_op("Range", inputs=(3, 3), static=[0, 1, 2])
def _range(xp: Any, node: Node, start: Any, limit: Any, delta: Any) -> Any:
    count = max(math.ceil((limit.item() - start.item()) / delta.item()), 0)
    return (start + delta * np.arange(count, dtype=start.dtype)).astype(start.dtype)


@_op("Reshape", attrs=["allowzero"], inputs=(2, 2), static=[1])
def _reshape(xp: Any, node: Node, x: Any, shape: Any) -> Any:
    dims = _ints(shape)
    if not node.attr("allowzero", 0):  # 0 copies the input's dimension
        dims = [x.shape[i] if d == 0 else d for i, d in enumerate(dims)]
    return xp.reshape(x, tuple(dims))


@_op("Flatten", attrs=["axis"])
def _flatten(xp: Any, node: Node, x: Any) -> Any:
    axis = node.attr("axis", 1)
    axis = axis + x.ndim if axis < 0 else axis
    return xp.reshape(x, (math.prod(x.shape[:axis]), math.prod(x.shape[axis:])))


def _axes_from(node: Node, axes: Any) -> list[int] | None:
    """Axes given as an attribute (older opsets) or as an input (newer ones)."""
    if axes is not None:
        return _ints(axes)
    given = node.attr("axes")
    return None if given is None else [int(a) for a in given]


@_op("Squeeze", attrs=["axes"], inputs=(1, 2), static=[1])
def _squeeze(xp: Any, node: Node, x: Any, axes: Any = None) -> Any:
    chosen = _axes_from(node, axes)
    if chosen is None:
        drop = {i for i, d in enumerate(x.shape) if d == 1}
    else:
        drop = {_axis(a, x.ndim, node) for a in chosen}
        if any(x.shape[a] != 1 for a in drop):
            raise _refuse(node, f"can't squeeze axes {chosen} of shape {x.shape}", ArgumentError)
    return xp.reshape(x, tuple(d for i, d in enumerate(x.shape) if i not in drop))


@_op("Unsqueeze", attrs=["axes"], inputs=(1, 2), static=[1])
def _unsqueeze(xp: Any, node: Node, x: Any, axes: Any = None) -> Any:
    chosen = _axes_from(node, axes) or []
    rank = x.ndim + len(chosen)
    new = {_axis(a, rank, node) for a in chosen}
    dims = iter(x.shape)
    return xp.reshape(x, tuple(1 if i in new else next(dims) for i in range(rank)))


@_op("Transpose", attrs=["perm"])
def _transpose(xp: Any, node: Node, x: Any) -> Any:
    perm = node.attr("perm")
    return xp.permute_dims(x, tuple(perm) if perm is not None else tuple(reversed(range(x.ndim))))


@_op("Concat", attrs=["axis"], inputs=(1, 1 << 16))
def _concat(xp: Any, node: Node, *xs: Any) -> Any:
    return xp.concat(list(xs), axis=node.attr("axis"))


@_op("Split", attrs=["axis", "split", "num_outputs"], inputs=(1, 2), outputs=1 << 16, static=[1])
def _split(xp: Any, node: Node, x: Any, split: Any = None) -> Any:
    axis = _axis(node.attr("axis", 0), x.ndim, node)
    n = len(node.outputs)
    size = x.shape[axis]
    if split is not None or node.attr("split") is not None:
        sizes = _ints(split if split is not None else node.attr("split"))
    else:
        n = node.attr("num_outputs", n)
        step = -(-size // n)  # the last part takes what is left
        sizes = [min(step, size - i * step) for i in range(n)]
    if sum(sizes) != size:
        raise _refuse(node, f"split sizes {sizes} don't add up to {size}", ArgumentError)
    parts, start = [], 0
    for s in sizes:
        index = (slice(None),) * axis + (slice(start, start + s),)
        parts.append(x[index])
        start += s
    return tuple(parts)


@_op("CumSum", attrs=["exclusive", "reverse"], inputs=(2, 2), static=[1])
def _cumsum(xp: Any, node: Node, x: Any, axis: Any) -> Any:
    axis = _axis(_ints(axis)[0], x.ndim, node)
    if node.attr("reverse", 0):
        x = xp.flip(x, axis=axis)
    cumsum: Any = np.cumsum if xp is np else ert.cumulative_sum
    y = cumsum(x, axis=axis, dtype=x.dtype)
    if node.attr("exclusive", 0):  # each sum without its own element: shift by one
        head = xp.zeros_like(x[(slice(None),) * axis + (slice(0, 1),)])
        y = xp.concat([head, y[(slice(None),) * axis + (slice(0, -1),)]], axis=axis)
    return xp.flip(y, axis=axis) if node.attr("reverse", 0) else y


@_op("TopK", attrs=["axis", "largest", "sorted"], inputs=(2, 2), outputs=2, static=[1], numpy=False)
def _top_k(xp: Any, node: Node, x: Any, k: Any) -> Any:
    """The k largest (or smallest) along ``axis``, sorted, ties to the lower index;
    ``sorted=0`` leaves the order to the runtime, and sorted is one."""
    axis = _axis(node.attr("axis", -1), x.ndim, node)
    count = _ints(k)[0]
    if not 0 <= count <= x.shape[axis]:
        raise _refuse(
            node, f"k={count} is out of range for an axis of {x.shape[axis]}", ArgumentError
        )
    order = ert.argsort(x, axis=axis, descending=bool(node.attr("largest", 1)), stable=True)
    indices = order[(slice(None),) * axis + (slice(0, count),)]
    return ert.take_along_axis(x, indices, axis=axis), indices


def _equation_given(node: Node) -> None:
    if not isinstance(node.attr("equation"), str):
        raise _refuse(node, "the equation attribute is missing")


@_op("Einsum", attrs=["equation"], inputs=(1, 1 << 16), check=_equation_given)
def _einsum(xp: Any, node: Node, *xs: Any) -> Any:
    return xp.einsum(node.attr("equation"), *xs)


@_op("Slice", attrs=["starts", "ends", "axes"], inputs=(1, 5), static=[1, 2, 3, 4])
def _slice(
    xp: Any,
    node: Node,
    x: Any,
    starts: Any = None,
    ends: Any = None,
    axes: Any = None,
    steps: Any = None,
) -> Any:
    if node.opset < 10:  # bounds were attributes
        starts, ends, axes = node.attr("starts"), node.attr("ends"), node.attr("axes")
    begin, stop = _ints(starts), _ints(ends)
    chosen = list(range(len(begin))) if axes is None else _ints(axes)
    step = [1] * len(begin) if steps is None else _ints(steps)
    index = [slice(None)] * x.ndim
    for b, e, a, s in zip(begin, stop, chosen, step, strict=True):
        if s == 0:
            raise _refuse(node, "a slice step can't be 0", ArgumentError)
        index[_axis(a, x.ndim, node)] = slice(b, e, s)  # Python's slices clamp as ONNX's do
    return x[tuple(index)]


@_op("Gather", attrs=["axis"], inputs=(2, 2))
def _gather(xp: Any, node: Node, data: Any, indices: Any) -> Any:
    return xp.take(data, indices, axis=_axis(node.attr("axis", 0), data.ndim, node))


@_op("GatherElements", attrs=["axis"], inputs=(2, 2))
def _gather_elements(xp: Any, node: Node, data: Any, indices: Any) -> Any:
    return xp.take_along_axis(data, indices, axis=_axis(node.attr("axis", 0), data.ndim, node))


@_op("Expand", inputs=(2, 2), static=[1])
def _expand(xp: Any, node: Node, x: Any, shape: Any) -> Any:
    # ONNX's Expand broadcasts both ways: a 1 in ``shape`` keeps the input's size.
    return xp.broadcast_to(x, np.broadcast_shapes(x.shape, tuple(_ints(shape))))


@_op("Tile", inputs=(2, 2), static=[1])
def _tile(xp: Any, node: Node, x: Any, repeats: Any) -> Any:
    return xp.tile(x, tuple(_ints(repeats)))


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}


def _pads_given(node: Node) -> None:
    given = node.attr("pads") if node.opset < 11 else (node.inputs[1:2] or [""])[0]
    if given is None or given == "":
        raise _refuse(node, "needs its pads (an attribute before opset 11, an input since)")


@_op(
    "Pad",
    attrs=["mode", "pads", "value"],  # the last two: attributes before opset 11
    inputs=(1, 4),
    static=[1, 2, 3],
    numpy=False,
    check=_checks(_one_of("mode", list(_PAD_MODES), "constant"), _pads_given),
)
def _pad(xp: Any, node: Node, x: Any, pads: Any = None, value: Any = None, axes: Any = None) -> Any:
    if node.opset < 11:
        pads, value = node.attr("pads"), node.attr("value", 0.0)
    widths = _ints(pads)
    chosen = list(range(x.ndim)) if axes is None else [_axis(a, x.ndim, node) for a in _ints(axes)]
    if len(widths) != 2 * len(chosen):
        raise _refuse(node, f"{len(widths)} pads for {len(chosen)} axes", ArgumentError)
    begin = dict(zip(chosen, widths[: len(chosen)], strict=True))
    end = dict(zip(chosen, widths[len(chosen) :], strict=True))
    torch_pad: list[int] = []  # PyTorch's order: the last axis first
    for axis in reversed(range(x.ndim)):
        torch_pad += [begin.get(axis, 0), end.get(axis, 0)]
    mode = _PAD_MODES[node.attr("mode", "constant")]
    fill = None if mode != "constant" else (0 if value is None else np.asarray(value).item())
    return ert.pad(x, tuple(torch_pad), mode=mode, value=fill)


# -- Resize -------------------------------------------------------------------------------
#: Where output position ``x`` samples the input, per coordinate_transformation_mode,
#: for an axis of ``n_in`` -> ``n_out`` at ``scale`` (all float32, as ONNX Runtime
#: computes them, so nearest picks the same pixel at ties).
_RESIZE_COORDS: dict[str, Callable[[np.ndarray, int, int, np.float32], np.ndarray]] = {
    "asymmetric": lambda x, n_in, n_out, scale: x / scale,
    "half_pixel": lambda x, n_in, n_out, scale: (x + np.float32(0.5)) / scale - np.float32(0.5),
    "pytorch_half_pixel": lambda x, n_in, n_out, scale: (
        (x + np.float32(0.5)) / scale - np.float32(0.5) if n_out > 1 else np.zeros_like(x)
    ),
    "align_corners": lambda x, n_in, n_out, scale: (
        x * np.float32((n_in - 1) / (n_out - 1)) if n_out > 1 else np.zeros_like(x)
    ),
    "half_pixel_symmetric": lambda x, n_in, n_out, scale: (
        np.float32(n_in / 2) * (np.float32(1) - np.float32(n_out) / (scale * np.float32(n_in)))
        + (x + np.float32(0.5)) / scale
        - np.float32(0.5)
    ),
}

#: nearest_mode: the input index a source position rounds to.
_RESIZE_NEAREST: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "round_prefer_floor": lambda p: np.where(p - np.floor(p) == 0.5, np.floor(p), np.round(p)),
    "round_prefer_ceil": lambda p: np.where(p - np.floor(p) == 0.5, np.ceil(p), np.round(p)),
    "floor": np.floor,
    "ceil": np.ceil,
}


def _resize_opset(node: Node) -> None:
    if node.opset < 11:  # Resize-10 rounds and maps coordinates its own way
        raise _refuse(node, "Resize before opset 11 is not supported")


def _resize_scales(node: Node, x: Any, scales: Any, sizes: Any) -> list[tuple[int, int, Any]]:
    """(axis, output length, scale) for each axis the Resize changes."""
    axes = node.attr("axes")
    chosen = list(range(x.ndim)) if axes is None else [_axis(a, x.ndim, node) for a in axes]
    given_sizes = sizes is not None and np.asarray(sizes).size > 0
    if given_sizes:
        lengths = _ints(sizes)
        if len(lengths) != len(chosen):
            raise _refuse(node, f"{len(lengths)} sizes for {len(chosen)} axes", ArgumentError)
        # A scale's float32 value, as ONNX Runtime takes it from the sizes.
        factors = [
            np.float32(n) / np.float32(x.shape[a]) for a, n in zip(chosen, lengths, strict=True)
        ]
    else:
        if scales is None or np.asarray(scales).size == 0:
            raise _refuse(node, "neither scales nor sizes is given", ArgumentError)
        factors = [np.float32(f) for f in np.asarray(scales, np.float32).reshape(-1)]
        if len(factors) != len(chosen) or min(factors) <= 0:
            raise _refuse(node, f"scales {list(factors)} for {len(chosen)} axes", ArgumentError)
        lengths = [
            int(np.float32(x.shape[a]) * f)  # float32, truncated, as ONNX Runtime does
            for a, f in zip(chosen, factors, strict=True)
        ]
    return [
        (a, n, f)
        for a, n, f in zip(chosen, lengths, factors, strict=True)
        if n != x.shape[a] or f != 1
    ]


@_op(
    "Resize",
    attrs=[
        "mode", "coordinate_transformation_mode", "nearest_mode", "axes", "antialias",
        "keep_aspect_ratio_policy", "cubic_coeff_a", "exclude_outside", "extrapolation_value",
    ],
    inputs=(1, 4),
    static=[1, 2, 3],
    numpy=False,
    check=_checks(
        _resize_opset,
        _one_of("mode", ["nearest", "linear"], "nearest"),
        _one_of("coordinate_transformation_mode", list(_RESIZE_COORDS), "half_pixel"),
        _one_of("nearest_mode", list(_RESIZE_NEAREST), "round_prefer_floor"),
        _one_of("antialias", [0], 0),
        _one_of("keep_aspect_ratio_policy", ["stretch"], "stretch"),
    ),
)  # fmt: skip
def _resize(
    xp: Any, node: Node, x: Any, roi: Any = None, scales: Any = None, sizes: Any = None
) -> Any:
    """Nearest or (multi)linear resizing, axis by axis: each axis gathers the
    input rows its output positions sample (and, for linear, blends the two
    around each), with ONNX's coordinate transform and rounding done here on
    the static shapes."""
    coords = _RESIZE_COORDS[node.attr("coordinate_transformation_mode", "half_pixel")]
    linear = node.attr("mode", "nearest") == "linear"
    if linear and x.dtype.kind != "f":
        raise _refuse(node, f"linear resizing needs a float input, got {x.dtype}", ArgumentError)
    nearest = _RESIZE_NEAREST[node.attr("nearest_mode", "round_prefer_floor")]
    y = x
    for axis, n_out, scale in _resize_scales(node, x, scales, sizes):
        n_in = x.shape[axis]
        source = coords(np.arange(n_out, dtype=np.float32), n_in, n_out, scale)
        if not linear:
            index = np.clip(nearest(source), 0, n_in - 1).astype(np.int64)
            y = ert.take(y, ert.asarray(index), axis=axis)
            continue
        source = np.clip(source, 0, n_in - 1)
        low = np.minimum(np.floor(source), n_in - 1).astype(np.int64)
        high = np.minimum(low + 1, n_in - 1)
        shape = [1] * x.ndim
        shape[axis] = n_out
        weight = ert.asarray((source - low).astype(x.dtype).reshape(shape))
        below = ert.take(y, ert.asarray(low), axis=axis)
        y = below + (ert.take(y, ert.asarray(high), axis=axis) - below) * weight
    return y


# -- reductions ---------------------------------------------------------------------------
_REDUCE = {
    "ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max", "ReduceMin": "min",
    "ReduceProd": "prod", "ReduceL2": "l2", "ReduceSumSquare": "sum_square",
}  # fmt: skip


def _reduce(name: str) -> Handler:
    def run(xp: Any, node: Node, x: Any, axes: Any = None) -> Any:
        chosen = _axes_from(node, axes)
        if not chosen:
            if node.attr("noop_with_empty_axes", 0):
                return x
            chosen = list(range(x.ndim))
        axis = tuple(sorted({_axis(a, x.ndim, node) for a in chosen}))
        keepdims = bool(node.attr("keepdims", 1))
        if name in ("l2", "sum_square"):
            total = xp.sum(xp.multiply(x, x), axis=axis, keepdims=keepdims)
            return xp.sqrt(total) if name == "l2" else total
        return getattr(xp, name)(x, axis=axis, keepdims=keepdims)

    return run


for _type, _name in _REDUCE.items():
    _op(_type, attrs=["axes", "keepdims", "noop_with_empty_axes"], inputs=(1, 2), static=[1])(
        _reduce(_name)
    )


def _arg(name: str) -> Handler:
    def run(xp: Any, node: Node, x: Any) -> Any:
        axis = _axis(node.attr("axis", 0), x.ndim, node)
        out = getattr(xp, name)(x, axis=axis, keepdims=bool(node.attr("keepdims", 1)))
        return _astype(xp, out, np.dtype(np.int64))

    return run


for _type, _name in (("ArgMax", "argmax"), ("ArgMin", "argmin")):
    _op(
        _type,
        attrs=["axis", "keepdims", "select_last_index"],
        check=_one_of("select_last_index", [0], 0),
    )(_arg(_name))


# -- linear algebra and normalization ------------------------------------------------------------
@_op("Gemm", attrs=["alpha", "beta", "transA", "transB"], inputs=(2, 3))
def _gemm(xp: Any, node: Node, a: Any, b: Any, c: Any = None) -> Any:
    if node.attr("transA", 0):
        a = xp.permute_dims(a, (1, 0))
    if node.attr("transB", 0):
        b = xp.permute_dims(b, (1, 0))
    y = xp.matmul(a, b)
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    if alpha != 1.0:
        y = xp.multiply(y, alpha)
    if c is not None and beta != 0.0:
        y = xp.add(y, c if beta == 1.0 else xp.multiply(c, beta))
    return y


def _softmax(log: bool) -> Handler:
    def run(xp: Any, node: Node, x: Any) -> Any:
        fn = ert.log_softmax if log else ert.softmax
        if node.opset >= 13:
            return fn(x, axis=node.attr("axis", -1))
        # Before opset 13: the input is seen as 2-d, split at ``axis``.
        axis = _axis(node.attr("axis", 1), x.ndim, node)
        rows = ert.reshape(x, (math.prod(x.shape[:axis]), math.prod(x.shape[axis:])))
        return ert.reshape(fn(rows, axis=-1), x.shape)

    return run


_op("Softmax", attrs=["axis"], numpy=False)(_softmax(log=False))
_op("LogSoftmax", attrs=["axis"], numpy=False)(_softmax(log=True))


@_op(
    "LayerNormalization",
    attrs=["axis", "epsilon", "stash_type"],
    inputs=(2, 3),
    numpy=False,
    check=_one_of("stash_type", [1], 1),
)
def _layer_norm(xp: Any, node: Node, x: Any, scale: Any, bias: Any = None) -> Any:
    axis = _axis(node.attr("axis", -1), x.ndim, node)
    normalized = x.shape[axis:]
    # ONNX lets scale and bias broadcast to the normalized shape; eagerrt wants it exactly.
    if scale.shape != normalized:
        scale = ert.broadcast_to(scale, normalized)
    if bias is not None and bias.shape != normalized:
        bias = ert.broadcast_to(bias, normalized)
    return ert.layer_norm(x, normalized, scale, bias, eps=float(node.attr("epsilon", 1e-5)))


@_op(
    "BatchNormalization",
    attrs=["epsilon", "momentum", "training_mode", "spatial"],
    inputs=(5, 5),
    numpy=False,
    check=_checks(_one_of("training_mode", [0], 0), _one_of("spatial", [1], 1)),
)
def _batch_norm(xp: Any, node: Node, x: Any, scale: Any, bias: Any, mean: Any, var: Any) -> Any:
    return ert.batch_norm(x, mean, var, scale, bias, eps=float(node.attr("epsilon", 1e-5)))


# -- convolution and pooling --------------------------------------------------------------
_AUTO_PAD = ["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]


def _window_pads(
    node: Node,
    spatial: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
) -> list[int]:
    """ONNX's ``pads`` (all begins, then all ends) after ``auto_pad``."""
    auto = node.attr("auto_pad", "NOTSET")
    n = len(spatial)
    if auto == "VALID":
        return [0] * 2 * n
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        begins, ends = [], []
        for size, k, s, d in zip(spatial, kernel, strides, dilations, strict=True):
            total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
            small, large = total // 2, total - total // 2
            begins.append(small if auto == "SAME_UPPER" else large)
            ends.append(large if auto == "SAME_UPPER" else small)
        return begins + ends
    pads = node.attr("pads")
    return [0] * 2 * n if pads is None else [int(p) for p in pads]


def _geometry(node: Node, x: Any, kernel: Sequence[int]) -> tuple[list[int], ...]:
    """A window's kernel, strides, dilations, begin pads and end pads, each as the
    2-d op wants it (a 1-d window's with a leading 1, or 0 for pads: see :func:`_as_2d`)."""
    n, ndim = len(kernel), x.ndim
    strides = [int(s) for s in node.attr("strides", [1] * n)]
    dilations = [int(d) for d in node.attr("dilations", [1] * n)]
    begins, ends = _split_pads(_window_pads(node, x.shape[2:], kernel, strides, dilations), ndim)
    return _pairs(kernel, ndim), _pairs(strides, ndim), _pairs(dilations, ndim), begins, ends


def _as_2d(x: Any, node: Node, what: str) -> Any:
    """A 1-d (N, C, L) input as (N, C, 1, L); 2-d as is; others refused."""
    if x.ndim == 3:
        return ert.reshape(x, (x.shape[0], x.shape[1], 1, x.shape[2]))
    if x.ndim != 4:
        raise _refuse(
            node, f"{what} of a rank-{x.ndim} input is not supported (1-d and 2-d: rank 3 and 4)"
        )
    return x


def _pairs(values: Sequence[int], ndim_in: int) -> list[int]:
    return [1, *values] if ndim_in == 3 and len(values) == 1 else list(values)


def _split_pads(pads: Sequence[int], ndim_in: int) -> tuple[list[int], list[int]]:
    n = len(pads) // 2
    begins, ends = list(pads[:n]), list(pads[n:])
    if ndim_in == 3:
        begins, ends = [0, *begins], [0, *ends]
    return begins, ends


def _explicit_pad(x: Any, begins: Sequence[int], ends: Sequence[int], value: float) -> Any:
    # PyTorch's pad order: the last axis first.
    return ert.pad(x, (begins[1], ends[1], begins[0], ends[0]), value=value)


def _window_ranks(*ranks: int) -> Callable[[Node], object]:
    """A check that a node's ``kernel_shape``, where given, has one of ``ranks`` sizes."""
    supported = " and ".join(f"{r}-d" for r in ranks) + (" are" if len(ranks) > 1 else " is")

    def check(node: Node) -> None:
        kernel = node.attr("kernel_shape")
        if kernel is not None and len(kernel) not in ranks:
            raise _refuse(node, f"a {len(kernel)}-d window is not supported ({supported})")

    return check


_spatial_rank = _window_ranks(1, 2)
_auto_pad = _one_of("auto_pad", _AUTO_PAD, "NOTSET")


_CONV_ATTRS = ["auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"]


@_op("Conv", attrs=_CONV_ATTRS, inputs=(2, 3), numpy=False, check=_checks(_auto_pad, _spatial_rank))
def _conv(xp: Any, node: Node, x: Any, w: Any, b: Any = None) -> Any:
    _, stride, dilation, begins, ends = _geometry(node, x, w.shape[2:])
    x2 = _as_2d(x, node, "Conv")
    w2 = _as_2d(w, node, "a Conv weight") if w.ndim == 3 else w
    padding: Any = (begins[0], begins[1])
    if begins != ends:  # asymmetric: pad first
        x2, padding = _explicit_pad(x2, begins, ends, 0.0), 0
    groups = int(node.attr("group", 1))
    y = ert.conv2d(x2, w2, b, stride=stride, padding=padding, dilation=dilation, groups=groups)
    return ert.reshape(y, (*y.shape[:2], y.shape[3])) if x.ndim == 3 else y


def _no_output_shape(node: Node) -> None:
    if node.attr("output_shape") is not None:
        raise _refuse(node, "output_shape is not supported (give pads and output_padding)")


@_op(
    "ConvTranspose",
    attrs=[*_CONV_ATTRS, "output_padding", "output_shape"],
    inputs=(2, 3),
    numpy=False,
    check=_checks(_one_of("auto_pad", ["NOTSET"], "NOTSET"), _window_ranks(2), _no_output_shape),
)
def _conv_transpose(xp: Any, node: Node, x: Any, w: Any, b: Any = None) -> Any:
    if x.ndim != 4:
        raise _refuse(
            node, f"ConvTranspose of a rank-{x.ndim} input is not supported (2-d: rank 4)"
        )
    strides = [int(s) for s in node.attr("strides", [1, 1])]
    dilations = [int(d) for d in node.attr("dilations", [1, 1])]
    begins, ends = _split_pads([int(p) for p in node.attr("pads", [0, 0, 0, 0])], 4)
    given = [int(p) for p in node.attr("output_padding", [0, 0])]
    groups = int(node.attr("group", 1))
    # PyTorch's form crops both sides alike (padding), then adds output padding at the
    # end (under the stride); ONNX's crops begins and ends apart. Where they differ by
    # what output padding can make up, one op; otherwise crop the uncropped result.
    extra = [e + (p0 - p1) for e, p0, p1 in zip(given, begins, ends, strict=True)]
    if all(0 <= e < max(s, d) for e, s, d in zip(extra, strides, dilations, strict=True)):
        return ert.conv_transpose2d(
            x, w, b, stride=strides, padding=begins, output_padding=extra, groups=groups,
            dilation=dilations,
        )  # fmt: skip
    tail = [max(0, e - p1) for e, p1 in zip(given, ends, strict=True)]
    y = ert.conv_transpose2d(
        x, w, b, stride=strides, output_padding=tail, groups=groups, dilation=dilations
    )
    full = [size - t for size, t in zip(y.shape[2:], tail, strict=True)]
    sizes = [f + e - p0 - p1 for f, e, p0, p1 in zip(full, given, begins, ends, strict=True)]
    return y[:, :, begins[0] : begins[0] + sizes[0], begins[1] : begins[1] + sizes[1]]


def _pool_kernel(node: Node) -> list[int]:
    kernel = node.attr("kernel_shape")
    if kernel is None:
        raise _refuse(node, "needs the kernel_shape attribute")
    return [int(k) for k in kernel]


_POOL_ATTRS = ["auto_pad", "ceil_mode", "kernel_shape", "pads", "strides"]


@_op(
    "MaxPool",
    attrs=[*_POOL_ATTRS, "dilations", "storage_order"],
    numpy=False,
    check=_checks(_auto_pad, _one_of("storage_order", [0], 0), _pool_kernel, _spatial_rank),
)
def _max_pool(xp: Any, node: Node, x: Any) -> Any:
    k2, stride, dilation, begins, ends = _geometry(node, x, _pool_kernel(node))
    x2 = _as_2d(x, node, "MaxPool")
    padding: Any = begins
    if begins != ends or any(2 * p > k for p, k in zip(begins, k2, strict=True)):
        x2, padding = _explicit_pad(x2, begins, ends, -np.inf), 0
    ceil = bool(node.attr("ceil_mode", 0))
    y = ert.max_pool2d(x2, k2, stride=stride, padding=padding, dilation=dilation, ceil_mode=ceil)
    return ert.reshape(y, (*y.shape[:2], y.shape[3])) if x.ndim == 3 else y


@_op(
    "AveragePool",
    attrs=[*_POOL_ATTRS, "count_include_pad", "dilations"],
    numpy=False,
    check=_checks(_auto_pad, _pool_kernel, _spatial_rank),
)
def _average_pool(xp: Any, node: Node, x: Any) -> Any:
    k2, stride, dilation, begins, ends = _geometry(node, x, _pool_kernel(node))
    if any(d != 1 for d in dilation):
        raise _refuse(node, "dilated average pooling is not supported")
    x2 = _as_2d(x, node, "AveragePool")
    include, ceil = bool(node.attr("count_include_pad", 0)), bool(node.attr("ceil_mode", 0))
    if begins != ends or any(2 * p > k for p, k in zip(begins, k2, strict=True)):
        padded = _explicit_pad(x2, begins, ends, 0.0)
        y = ert.avg_pool2d(padded, k2, stride=stride, padding=0, ceil_mode=ceil)
        if not include:
            # The mean over the real elements only: the same pooling of a mask of ones
            # (zeros where padded) counts them, and whatever divisor the pooling used
            # cancels. The mask is a constant, so graph mode folds its pooling.
            ones = np.ones((1, 1, *x2.shape[2:]), dtype=x2.dtype)
            mask = _explicit_pad(ert.asarray(ones), begins, ends, 0.0)
            y = ert.divide(y, ert.avg_pool2d(mask, k2, stride=stride, padding=0, ceil_mode=ceil))
    else:
        y = ert.avg_pool2d(
            x2, k2, stride=stride, padding=begins, ceil_mode=ceil, count_include_pad=include
        )
    return ert.reshape(y, (*y.shape[:2], y.shape[3])) if x.ndim == 3 else y


@_op("GlobalAveragePool", numpy=False)
def _global_average_pool(xp: Any, node: Node, x: Any) -> Any:
    return ert.mean(x, axis=tuple(range(2, x.ndim)), keepdims=True)


@_op("GlobalMaxPool", numpy=False)
def _global_max_pool(xp: Any, node: Node, x: Any) -> Any:
    return ert.max(x, axis=tuple(range(2, x.ndim)), keepdims=True)


# -- made by the importer's rewrites -----------------------------------------------------------
@_op(
    "ScaledDotProductAttention",
    attrs=["scale", "keep"],
    inputs=(3, 1 << 16),
    numpy=False,
    table=REWRITES,
)
def _attention(xp: Any, node: Node, q: Any, kt: Any, v: Any, *masks: Any) -> Any:
    # The exporter's key arrives transposed, (..., E, S): a view turns it back.
    k = ert.matrix_transpose(kt)
    mask = masks[0] if masks else None
    if node.attr("keep", 0):
        # Boolean operands of one mask, AND-ed: those known now to be all True
        # (shape arithmetic's masks) drop out, so that a padding mask reaches
        # attention as (batch, 1, 1, keys), the form its pooled kernel takes.
        mask = None
        for m in masks:
            if isinstance(m, np.ndarray) and m.all():
                continue
            mask = m if mask is None else ert.logical_and(mask, m)
    if isinstance(mask, np.ndarray):
        mask = ert.asarray(mask)
    return ert.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=node.attr("scale"))


@_op("Linear", attrs=["split"], inputs=(2, 3), outputs=1 << 16, table=REWRITES)
def _linear(xp: Any, node: Node, x: Any, w: Any, b: Any = None) -> Any:
    # ``w`` is (n, k): the importer transposed the graph's (k, n) weight once, at load.
    if xp is np or x.dtype != w.dtype:  # known values, or a product MatMul would promote
        y = xp.matmul(x, xp.permute_dims(w, (1, 0)))
        y = y if b is None else xp.add(y, b)
    else:
        y = ert.linear(x, w) if b is None else ert.linear(x, w, b)
    split = node.attr("split")
    if split is None:
        return y
    # Stacked projections (query, key and value): each output a view of its columns.
    bounds = [int(e) for e in np.cumsum([0, *split])]
    lead = (slice(None),) * (y.ndim - 1)
    return tuple(y[(*lead, slice(s, e))] for s, e in itertools.pairwise(bounds))
