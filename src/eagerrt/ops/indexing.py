"""Indexing: reading with ``t[index]``, ``take`` and ``take_along_axis``.

Basic indexes (ints, slices, ``None``, ``...``) give views at no copy.
Integer-array indexes (tensors, arrays or lists of ints) gather, with numpy's
semantics; a bad index fails on read, like any kernel failure. A boolean mask
decides the result's *shape* by its data, so ``t[mask]`` waits for the mask at
the call (only for the mask: ``t`` itself may still be pending) and returns a
tensor of known shape.

>>> import eagerrt as ert
>>> x = ert.arange(6).reshape((2, 3))
>>> x[:, 1:].shape, x[ert.asarray([1, 0])].numpy().tolist()
((2, 2), [[3, 4, 5], [0, 1, 2]])
>>> x[x > 2].numpy()
array([3, 4, 5])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._core import DTypeError, OutOfBoundsError
from ..tensor import Tensor
from ._rules import RuleOut, need_tensor, normalize_axis, view_cost
from .registry import GENERIC, call_error, define_op, exposes
from .wrap import wrap

__all__ = ["getitem", "take", "take_along_axis"]

_BASIC_INDEX_TYPES = (int, np.integer, slice, type(None), type(Ellipsis))
_Split = tuple[tuple[Any, ...], list[Tensor]]  # an index's template and its array operands


class IndexSlot:
    """Where the i-th array operand goes in an index template."""

    __slots__ = ("position",)

    def __init__(self, position: int) -> None:
        self.position = position

    def __repr__(self) -> str:
        return f"<index operand {self.position}>"


def split_index(index: Any, device: Any = None) -> _Split:
    """``index`` as a static template plus its array parts as tensors.

    The template holds the basic parts as they are and an :class:`IndexSlot`
    where each array part (a tensor, array or list of ints or bools) goes, so
    the array parts can be operands an op waits for. Lists and arrays become
    tensors on ``device`` (the indexed tensor's: an op takes one device).
    """
    parts = index if type(index) is tuple else (index,)
    template: list[Any] = []
    operands: list[Tensor] = []
    for part in parts:
        if isinstance(part, _BASIC_INDEX_TYPES):
            template.append(part)
            continue
        if type(part) is not Tensor:
            if not isinstance(part, (list, np.ndarray)):
                raise DTypeError(
                    f"an index must be an int, slice, None, ..., or an array of ints or "
                    f"bools, not {type(part).__name__}"
                )
            part = wrap(part, device=device)
        if part.dtype.kind not in "biu":
            raise DTypeError(f"an index array must hold ints or bools, not {part.dtype}")
        template.append(IndexSlot(len(operands)))
        operands.append(part)
    return tuple(template), operands


def fill_index(template: tuple[Any, ...], arrays: Any) -> tuple[Any, ...]:
    """The index a ``setitem`` write kernel was given: its ``template`` (the
    index's basic parts) with its slots replaced by ``arrays`` (the index
    arrays, as the device's arrays).

    >>> template, operands = split_index((0, [1, 2]))
    >>> fill_index(template, ["rows"])
    (0, 'rows')
    """
    return tuple(arrays[p.position] if type(p) is IndexSlot else p for p in template)


def indexed_shape(shape: tuple[int, ...], template: tuple[Any, ...], operands: Any) -> Any:
    """The shape ``x[index]`` has, from numpy's own indexing of a zero-strided
    stand-in: its semantics and errors, no memory touched. Integer operands
    stand in as zeros of their shape; boolean ones must be numpy arrays (their
    data decides the shape)."""
    stand_ins = [
        o if isinstance(o, np.ndarray) else np.zeros(o.shape, dtype=np.intp) for o in operands
    ]
    stand_in = np.broadcast_to(np.empty((), dtype=np.int8), shape)
    try:
        return stand_in[fill_index(template, stand_ins)].shape
    except IndexError as exc:
        raise OutOfBoundsError(f"index for shape {shape}: {exc}") from None


# -- basic indexing: a view ---------------------------------------------------------
def _getitem_rule(x: Any, index: Any) -> RuleOut:
    x = need_tensor("getitem", x)
    parts = index if isinstance(index, tuple) else (index,)
    for part in parts:
        if not isinstance(part, _BASIC_INDEX_TYPES):
            raise DTypeError(
                f"getitem's static index takes ints, slices, None and ...; got "
                f"{type(part).__name__} (index with t[...] for array indexes)"
            )
    return indexed_shape(x.shape, parts, ()), x.dtype


getitem = define_op(
    "getitem", _getitem_rule, cost=view_cost, operands=1, doc="Basic indexing (a view)."
)
getitem.register_kernel(GENERIC, lambda x, index: x[index])


# -- array indexing: a gather -----------------------------------------------------------
def _gather_rule(x: Any, *arrays: Any, template: Any) -> RuleOut:
    return indexed_shape(x.shape, template, arrays), x.dtype


_gather = define_op(
    "gather_index",
    _gather_rule,
    doc="``x[index]`` with integer-array (and resolved boolean) parts.",
)
_gather.register_kernel(GENERIC, lambda x, *arrays, template: x[fill_index(template, arrays)])


def index_tensor(x: Tensor, key: Any, /) -> Tensor:
    """``x[key]`` for any index numpy takes: ``Tensor.__getitem__``. A basic
    index gives a view: a write through it writes ``x`` too (``ops/writes.py``)."""
    index = key
    if type(index) is not tuple:
        if isinstance(index, _BASIC_INDEX_TYPES):
            return _view(x, getitem(x, index=index), index)
    elif all(isinstance(p, _BASIC_INDEX_TYPES) for p in index):
        return _view(x, getitem(x, index=index), index)
    try:
        template, operands = split_index(index, x.device)
    except DTypeError as exc:
        raise call_error(DTypeError, "getitem", (x,), {"index": index}, str(exc)) from None
    if not operands:
        return _view(x, getitem(x, index=template), template)
    if any(o.dtype.kind == "b" for o in operands):
        # numpy checks the masks against x (shapes, broadcasting with the
        # integer arrays) once their data is here: the error is still raised now.
        masks = [o.numpy() if o.dtype.kind == "b" else o for o in operands]
        try:
            indexed_shape(x.shape, template, masks)
        except OutOfBoundsError as exc:
            raise call_error(
                OutOfBoundsError, "getitem", (x,), {"index": index}, str(exc)
            ) from None
        template, operands = _resolve_masks(template, operands)
    return _gather(x, *operands, template=template)


def _view(base: Tensor, view: Tensor, index: Any) -> Tensor:
    """Mark ``view`` (``base[index]``, a basic index) as a view of ``base`` (not
    on a stream device, whose tensors take no writes; while tracing too, so a
    compiled function writes through views as its eager calls do). As in numpy,
    an int for every axis picks one element as a copy, not a view."""
    if view is base or type(view) is not Tensor or base.device.completes_at_enqueue:
        return view
    parts = index if type(index) is tuple else (index,)
    if len(parts) == base.ndim and all(
        isinstance(p, (int, np.integer)) and not isinstance(p, bool) for p in parts
    ):
        return view  # one element: a copy
    view._view_of = (base, index, getattr(base, "_writes", 0))
    return view


def _resolve_masks(template: tuple[Any, ...], operands: list[Tensor]) -> _Split:
    """Boolean masks as the integer positions of their true elements.

    A mask's data decides the result's shape, so this waits for the masks
    (only for them) here, at the call.
    """
    out: list[Any] = []
    resolved: list[Tensor] = []
    for part in template:
        if type(part) is not IndexSlot:
            out.append(part)
            continue
        o = operands[part.position]
        if o.dtype.kind != "b":
            out.append(IndexSlot(len(resolved)))
            resolved.append(o)
            continue
        mask = o.numpy()
        if mask.ndim == 0:  # numpy's rule: a new axis of length 1 or 0
            out.append(bool(mask))
            continue
        for positions in np.nonzero(mask):
            out.append(IndexSlot(len(resolved)))
            resolved.append(wrap(positions, device=o.device))
    return tuple(out), resolved


# -- take --------------------------------------------------------------------------------
def _take_rule(x: Any, indices: Any, axis: int | None = None) -> RuleOut:
    x = need_tensor("take", x)
    indices = need_tensor("take", indices)
    if indices.dtype.kind not in "iu":
        raise TypeError(f"take needs integer indices, got {indices.dtype}")
    if axis is None:  # numpy's: from the flattened tensor (the standard's 1-d case)
        return indices.shape, x.dtype
    ax = normalize_axis(axis, x.ndim)
    return x.shape[:ax] + indices.shape + x.shape[ax + 1 :], x.dtype


_take = define_op(
    "take",
    _take_rule,
    operands=2,
    doc="Gather elements by integer indices along ``axis``; a bad index fails on read.",
)
_take.register_kernel(GENERIC, lambda x, indices, axis=None: np.take(x, indices, axis=axis))


@exposes(_take)
def take(x: Any, indices: Any, /, *, axis: int | None = None) -> Tensor:
    """Gather elements of ``x`` by integer ``indices`` along ``axis`` (the
    flattened ``x`` for None); a bad index fails on read.

    >>> import eagerrt as ert
    >>> ert.take(ert.asarray([10, 20, 30]), ert.asarray([2, 2, 0])).numpy().tolist()
    [30, 30, 10]
    """
    return _take(x, indices, axis=axis)


def _take_along_axis_rule(x: Any, indices: Any, axis: int = -1) -> RuleOut:
    x = need_tensor("take_along_axis", x)
    indices = need_tensor("take_along_axis", indices)
    if indices.dtype.kind not in "iu":
        raise TypeError(f"take_along_axis needs integer indices, got {indices.dtype}")
    if indices.ndim != x.ndim:
        raise ValueError(f"indices have {indices.ndim} dimensions, x has {x.ndim}")
    ax = normalize_axis(axis, x.ndim)
    shape = []
    for i, (a, b) in enumerate(zip(x.shape, indices.shape, strict=True)):
        if i == ax:
            shape.append(b)
        elif a != b and 1 not in (a, b):
            raise ValueError(f"shapes {x.shape} and {indices.shape} differ off axis {ax}")
        else:
            shape.append(max(a, b) if 0 not in (a, b) else 0)
    return tuple(shape), x.dtype


_take_along_axis = define_op(
    "take_along_axis",
    _take_along_axis_rule,
    operands=2,
    doc="Pick from ``x`` along ``axis`` by same-rank ``indices`` (as argsort gives).",
)
_take_along_axis.register_kernel(
    GENERIC, lambda x, indices, axis=-1: np.take_along_axis(x, indices, axis=axis)
)


@exposes(_take_along_axis)
def take_along_axis(x: Any, indices: Any, /, *, axis: int = -1) -> Tensor:
    """Pick from ``x`` along ``axis`` by same-rank ``indices``, as argsort gives them.

    >>> import eagerrt as ert
    >>> x = ert.asarray([[3, 1, 2]])
    >>> ert.take_along_axis(x, ert.argsort(x, axis=1), axis=1).numpy().tolist()
    [[1, 2, 3]]
    """
    return _take_along_axis(x, indices, axis=axis)
