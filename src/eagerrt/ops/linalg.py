"""The Array API's linear algebra in the main namespace: ``matmul`` (the ``@``
operator), ``tensordot``, ``vecdot`` and ``matrix_transpose``; and ``einsum``.

The ``linalg`` extension (``eagerrt.linalg``) builds on these.

>>> import eagerrt as ert
>>> (ert.ones((2, 3)) @ ert.ones((3, 4))).shape
(2, 4)
>>> ert.vecdot(ert.asarray([[1.0, 2.0], [3.0, 4.0]]), ert.asarray([1.0, 1.0])).numpy()
array([3., 7.])
>>> ert.matrix_transpose(ert.zeros((5, 2, 3))).shape
(5, 3, 2)
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._core import ArgumentError, ShapeError, config
from ..tensor import Tensor
from ._rules import RuleOut, as_array, broadcast_shapes, normalize_axis, ufunc_dtype
from .registry import GENERIC, define_op, exposes

__all__ = ["einsum", "matmul", "matrix_transpose", "tensordot", "vecdot"]


def _tensor_operands(op: str, a: Any, b: Any) -> None:
    if type(a) is not Tensor or type(b) is not Tensor:
        # numpy says ValueError: a scalar has too few dimensions
        raise ValueError(f"{op} needs two tensors of at least one dimension, not a scalar")


def _matmul_rule(a: Any, b: Any) -> RuleOut:
    _tensor_operands("matmul", a, b)
    sa, sb = a.shape, b.shape
    # The common case first: two matrices of one float dtype.
    dtype = a.dtype if a.dtype is b.dtype and a.dtype.kind in "fc" else ufunc_dtype(np.matmul, a, b)
    if len(sa) == 2 and len(sb) == 2:
        if sa[1] != sb[0]:
            raise ShapeError(f"inner dimensions differ: {sa[1]} (of {sa}) vs {sb[0]} (of {sb})")
        return (sa[0], sb[1]), dtype
    if not sa or not sb:
        raise ShapeError("matmul does not take 0-d tensors; use multiply (*) for scalars")
    ka = sa[-1]
    kb = sb[0] if len(sb) == 1 else sb[-2]
    if ka != kb:
        raise ShapeError(f"inner dimensions differ: {ka} (of {sa}) vs {kb} (of {sb})")
    batch = broadcast_shapes(sa[:-2], sb[:-2])
    rows = (sa[-2],) if len(sa) > 1 else ()
    cols = (sb[-1],) if len(sb) > 1 else ()
    return batch + rows + cols, dtype


def _matmul_cost(shape: tuple[int, ...], dtype: np.dtype[Any], /, a: Tensor, b: Tensor) -> float:
    inner = a.shape[-1]
    return config.op_overhead_ns + 2.0 * math.prod(shape) * inner * config.ns_per_flop


matmul = define_op(
    "matmul", _matmul_rule, cost=_matmul_cost, doc="Matrix product with numpy's ``@`` rules."
)
matmul.register_kernel(GENERIC, np.matmul)
# matmul stays an op rather than a function in front of one: Tensor's ``@`` binds
# to its fast path. ``inspect.signature`` reports the standard's (x1, x2, /).
_POSITIONAL = inspect.Parameter.POSITIONAL_ONLY
setattr(  # noqa: B010 - whether Op declares __signature__ or not, for mypy
    matmul,
    "__signature__",
    inspect.Signature([inspect.Parameter(n, _POSITIONAL) for n in ("x1", "x2")]),
)


def _tensordot_axes(
    a: Tensor, b: Tensor, axes: int | Sequence[Any]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    if isinstance(axes, (int, np.integer)):
        axes = int(axes)
        if not 0 <= axes <= min(a.ndim, b.ndim):
            raise ShapeError(f"axes={axes} is out of range for {a.ndim}-d and {b.ndim}-d tensors")
        return tuple(range(a.ndim - axes, a.ndim)), tuple(range(axes))
    try:
        left, right = axes
    except (TypeError, ValueError):
        raise TypeError(f"axes must be an int or a pair of axis lists, got {axes!r}") from None
    left = (left,) if isinstance(left, (int, np.integer)) else tuple(left)
    right = (right,) if isinstance(right, (int, np.integer)) else tuple(right)
    if len(left) != len(right):
        raise ShapeError(f"axes {left} and {right} differ in length")
    left_axes = tuple(normalize_axis(x, a.ndim) for x in left)
    right_axes = tuple(normalize_axis(x, b.ndim) for x in right)
    if len(set(left_axes)) != len(left_axes) or len(set(right_axes)) != len(right_axes):
        raise ShapeError(f"repeated axis in axes={axes!r}")
    return left_axes, right_axes


def _tensordot_rule(a: Any, b: Any, axes: int | Sequence[Any] = 2) -> RuleOut:
    _tensor_operands("tensordot", a, b)
    left, right = _tensordot_axes(a, b, axes)
    for x, y in zip(left, right, strict=True):
        if a.shape[x] != b.shape[y]:
            raise ShapeError(
                f"contracted dimensions differ: axis {x} of {a.shape} vs axis {y} of {b.shape}"
            )
    shape = tuple(d for i, d in enumerate(a.shape) if i not in left) + tuple(
        d for i, d in enumerate(b.shape) if i not in right
    )
    return shape, np.result_type(a.dtype, b.dtype)


def _tensordot_cost(
    shape: tuple[int, ...], dtype: np.dtype[Any], /, a: Tensor, b: Tensor, axes: Any = 2
) -> float:
    left, _ = _tensordot_axes(a, b, axes)
    contracted = math.prod(a.shape[i] for i in left)
    return config.op_overhead_ns + 2.0 * math.prod(shape) * contracted * config.ns_per_flop


_tensordot = define_op(
    "tensordot",
    _tensordot_rule,
    cost=_tensordot_cost,
    operands=2,
    doc="Sum products over the given axes, as ``numpy.tensordot``.",
)
_tensordot.register_kernel(GENERIC, lambda a, b, axes=2: np.tensordot(a, b, axes=axes))


@exposes(_tensordot)
def tensordot(
    x1: Any, x2: Any, /, *, axes: int | tuple[Sequence[int], Sequence[int]] = 2
) -> Tensor:
    """Sum the products of ``x1`` and ``x2`` over the last ``axes`` axes of ``x1``
    and the first of ``x2``, or over the pair of axis lists ``axes``; the
    remaining axes of ``x1`` then of ``x2`` make the result's. (The op behind it,
    ``tensordot.op``, also takes ``axes`` by position, as numpy does.)

    >>> import eagerrt as ert
    >>> ert.tensordot(ert.ones((2, 3, 4)), ert.ones((3, 4, 5))).shape
    (2, 5)
    >>> ert.tensordot(ert.ones((2, 3)), ert.ones((3, 2)), axes=([0], [1])).shape
    (3, 3)
    """
    return _tensordot(x1, x2, axes=axes)


def contracted_axis(op: str, a: Tensor, b: Tensor, axis: Any) -> int:
    """The Array API's ``axis`` for vecdot and cross: counted back from the last
    dimension of each operand, as a negative axis valid for both."""
    ndim = min(a.ndim, b.ndim)
    if ndim == 0:
        raise ValueError(f"{op} needs tensors of at least one dimension")
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"axis must be an int, got {type(axis).__name__}")
    negative = from_the_end(a, b, int(axis))
    if not -ndim <= negative <= -1:
        raise ValueError(
            f"axis {axis} is out of range for {a.ndim}-d and {b.ndim}-d tensors "
            f"(counted from the end: -{ndim} to -1)"
        )
    return negative


def from_the_end(a: Any, b: Any, axis: int) -> int:
    """``axis`` counted from the end; a non-negative one counts from the front
    of the broadcast shape."""
    return axis - max(a.ndim, b.ndim) if axis >= 0 else axis


def contracted_shape(op: str, a: Tensor, b: Tensor, axis: int) -> tuple[int, ...]:
    """Broadcast ``a`` and ``b`` outside ``axis`` (negative), whose sizes must agree."""
    if a.shape[axis] != b.shape[axis]:
        raise ValueError(
            f"{op}: axis {axis} differs in size: {a.shape[axis]} (of {a.shape}) "
            f"vs {b.shape[axis]} (of {b.shape})"
        )
    return broadcast_shapes(a.shape, b.shape)


def _vecdot_rule(x1: Any, x2: Any, axis: int = -1) -> RuleOut:
    _tensor_operands("vecdot", x1, x2)
    ax = contracted_axis("vecdot", x1, x2, axis)
    shape = list(contracted_shape("vecdot", x1, x2, ax))
    del shape[ax]
    return tuple(shape), ufunc_dtype(np.vecdot, x1, x2)


def _vecdot_cost(
    shape: tuple[int, ...], dtype: np.dtype[Any], /, x1: Tensor, x2: Tensor, axis: int = -1
) -> float:
    inner = x1.shape[from_the_end(x1, x2, axis)]
    return config.op_overhead_ns + 2.0 * math.prod(shape) * inner * config.ns_per_element


_vecdot = define_op(
    "vecdot",
    _vecdot_rule,
    cost=_vecdot_cost,
    operands=2,
    doc="Dot products of vectors along ``axis``, conjugating the first.",
)


@_vecdot.kernel()
def _vecdot_kernel(x1: Any, x2: Any, axis: int = -1) -> Any:
    # Counted from each operand's end, as the standard does.
    ax = from_the_end(x1, x2, axis)
    return as_array(np.vecdot(np.moveaxis(x1, ax, -1), np.moveaxis(x2, ax, -1)))


@exposes(_vecdot)
def vecdot(x1: Any, x2: Any, /, *, axis: int = -1) -> Tensor:
    """The dot product of the vectors along ``axis`` (counted from the end), with
    the other dimensions broadcast; complex ``x1`` is conjugated, as the standard
    asks (``sum(conj(x1) * x2, axis=axis)``).

    >>> import eagerrt as ert
    >>> ert.vecdot(ert.asarray([1j, 2.0]), ert.asarray([1j, 1.0])).item()
    (3+0j)
    >>> ert.vecdot(ert.ones((4, 3, 2)), ert.ones((3, 2)), axis=-2).shape
    (4, 2)
    """
    return _vecdot(x1, x2, axis=axis)


def _matrix_transpose_rule(x: Any) -> RuleOut:
    if type(x) is not Tensor or x.ndim < 2:
        ndim = x.ndim if type(x) is Tensor else 0
        raise ValueError(f"matrix_transpose needs at least 2 dimensions, got {ndim}")
    return (*x.shape[:-2], x.shape[-1], x.shape[-2]), x.dtype


_matrix_transpose = define_op(
    "matrix_transpose",
    _matrix_transpose_rule,
    cost=lambda shape, dtype, /, *args, **static: config.op_overhead_ns,  # a view
    operands=1,
    doc="Swap the last two axes.",
)
_matrix_transpose.register_kernel(GENERIC, np.matrix_transpose)


@exposes(_matrix_transpose)
def matrix_transpose(x: Any, /) -> Tensor:
    """``x`` with its last two axes swapped (a view): a stack of transposed matrices.

    >>> import eagerrt as ert
    >>> ert.matrix_transpose(ert.asarray([[1, 2, 3]])).numpy()
    array([[1],
           [2],
           [3]])
    """
    return _matrix_transpose(x)


# -- einsum ------------------------------------------------------------------------------
def _einsum_terms(equation: str, count: int) -> tuple[list[str], str | None]:
    """The operands' subscripts and the output's (None: implicit) of ``equation``."""
    if not isinstance(equation, str):
        raise ArgumentError(f"einsum's equation must be a str, got {type(equation).__name__}")
    inputs, arrow, output = equation.replace(" ", "").partition("->")
    terms = inputs.split(",")
    if len(terms) != count:
        raise ValueError(f"equation {equation!r} has {len(terms)} operands, {count} given")
    for term in [*terms, output]:
        letters = term.replace("...", "", 1)
        if not all(c.isascii() and c.isalpha() for c in letters):
            raise ValueError(f"equation {equation!r}: subscripts are letters and one '...'")
    if arrow and len(set(output.replace("...", ""))) != len(output.replace("...", "")):
        raise ValueError(f"equation {equation!r} repeats a subscript in its output")
    return terms, output if arrow else None


def _labelled(term: str, x: Any) -> tuple[str, tuple[int, ...], tuple[int, ...] | None]:
    """A term's letters, their sizes in ``x``, and the dimensions its ellipsis
    covers (None without one)."""
    head, dots, tail = term.partition("...")
    if (not dots and len(term) != x.ndim) or (dots and len(head) + len(tail) > x.ndim):
        raise ValueError(f"subscripts {term!r} don't fit a {x.ndim}-d operand {x.shape}")
    dims = x.shape[: len(head)] + x.shape[x.ndim - len(tail) :]
    return head + tail, dims, x.shape[len(head) : x.ndim - len(tail)] if dots else None


def _einsum_sizes(
    equation: str, operands: Sequence[Any]
) -> tuple[str | None, dict[str, int], dict[str, int], tuple[int, ...]]:
    """The output's subscripts (None: implicit), letters' sizes and uses, the ellipses' shape."""
    terms, output = _einsum_terms(equation, len(operands))
    sizes: dict[str, int] = {}
    counts: dict[str, int] = {}
    ellipses: list[tuple[int, ...]] = []
    for term, x in zip(terms, operands, strict=True):
        letters, dims, ellipsis = _labelled(term, x)
        ellipses.append(ellipsis or ())
        for letter, size in zip(letters, dims, strict=True):
            if sizes.setdefault(letter, size) != size:
                raise ValueError(
                    f"subscript {letter!r} has size {sizes[letter]} and {size} in {equation!r}"
                )
            counts[letter] = counts.get(letter, 0) + 1
    return output, sizes, counts, broadcast_shapes(*ellipses)


def _einsum_rule(*operands: Any, equation: str) -> RuleOut:
    if not operands:
        raise ValueError("einsum needs at least one operand")
    output, sizes, counts, broadcast = _einsum_sizes(equation, operands)
    if output is None:  # numpy's implicit output: the ellipsis, then letters seen once, sorted
        output = "..." * bool(broadcast) + "".join(sorted(c for c, n in counts.items() if n == 1))
    head, dots, tail = output.partition("...")
    unknown = sorted(set(head + tail) - set(sizes))
    if unknown:
        raise ValueError(f"equation {equation!r}: output subscripts {unknown} are in no operand")
    shape = (*(sizes[c] for c in head), *(broadcast if dots else ()), *(sizes[c] for c in tail))
    return shape, np.result_type(*(x.dtype for x in operands))


def _einsum_cost(
    shape: tuple[int, ...], dtype: np.dtype[Any], /, *operands: Any, equation: str
) -> float:
    # Two flops for every combination of the subscripts (and ellipsis positions):
    # one pass over all of them, which numpy's pairwise contraction order stays under.
    _, sizes, _, broadcast = _einsum_sizes(equation, operands)
    combinations = math.prod(sizes.values()) * math.prod(broadcast)
    return config.op_overhead_ns + 2.0 * combinations * config.ns_per_flop


_einsum = define_op(
    "einsum",
    _einsum_rule,
    cost=_einsum_cost,
    doc="Sums of products named by subscripts, as ``numpy.einsum``.",
)
_einsum.register_kernel(
    GENERIC, lambda *arrays, equation: np.einsum(equation, *arrays, optimize=len(arrays) > 1)
)


def einsum(equation: str, /, *operands: Any) -> Tensor:
    """Sums of products of ``operands`` over the subscripts ``equation`` names,
    as ``numpy.einsum``: ``"ij,jk->ik"`` is a matrix product, ``"bhqd,bhkd->bhqk"``
    attention's scores, ``"ii->i"`` a diagonal; ``...`` stands for broadcast
    leading dimensions, and without ``->`` the output is the ellipsis then the
    subscripts seen once, sorted. Shapes are checked at the call; numpy's
    optimized contraction order (BLAS for the products) runs the kernel.

    >>> import eagerrt as ert
    >>> ert.einsum("ij,jk->ik", ert.ones((2, 3)), ert.ones((3, 4))).shape
    (2, 4)
    >>> ert.einsum("...ij->...ji", ert.zeros((5, 2, 3))).shape
    (5, 3, 2)
    >>> float(ert.einsum("ii", ert.asarray([[1.0, 2.0], [3.0, 4.0]])))
    5.0
    """
    return _einsum(*operands, equation=equation)
