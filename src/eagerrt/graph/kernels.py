"""Kernels for compiled graphs: each node's kernel, and where one exists its
*out form*, ``form(*arrays, out)``, which writes into a buffer the memory
plan gives it instead of allocating.

Out forms come from the op's registry entry (:meth:`~eagerrt.ops.registry.Op.out_form`,
which a device's backend fills as it loads, and ops made by passes such as fusion
carry), else from numpy's ufuncs (every elementwise op whose kernel is a ufunc:
the rule's dtype is the ufunc's own result type, so writing into ``out`` changes
nothing, on any array type that takes numpy's ``out=``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .ir import Node, Value

__all__ = ["OutForm", "eager_kernel", "kernel_for", "out_form_for", "writes_elementwise"]

#: ``form(*arrays, out)``: a node's result written into ``out``.
OutForm = Callable[..., Any]


def kernel_for(node: Node) -> Callable[..., Any]:
    """The kernel an eager call with these operands would run (specializers
    included), or where the op prepares for constant operands and some are
    constants, the kernel it prepared (see ``Op.prepare``)."""
    preparers = getattr(node.op, "_preparers", None)
    if preparers:
        preparer = preparers.get(node.out.device.name)
        constants = {
            i: v.const for i, v in enumerate(node.inputs) if type(v) is Value and v.is_const
        }
        if preparer is not None and constants:
            prepared = preparer(constants, *node.inputs, **node.static)
            if prepared is not None:
                return prepared
    return eager_kernel(node.op, node.inputs, node.static, node.out.device)


def eager_kernel(
    op: Any, inputs: Sequence[Any], static: dict[str, Any], device: Any
) -> Callable[..., Any]:
    """:func:`kernel_for` of a node given by its parts: ``op(*inputs, **static)`` on ``device``."""
    kernel = op._kernel_for(device)
    specializers = getattr(op, "_specializers", None)
    if specializers:
        specializer = specializers.get(device.name)
        if specializer is not None:
            kernel = specializer(*inputs, **static) or kernel
    return kernel


def out_form_for(node: Node, kernel: Callable[..., Any]) -> OutForm | None:
    """``kernel``'s out form for this node, or None (it allocates its result)."""
    if len(node.outputs) != 1 or node.static.get("out") is not None:
        return None
    if node.op.out_forms:
        return node.op.out_form_for(node)
    if isinstance(kernel, np.ufunc) and kernel.nout == 1 and not node.static:
        ufunc = kernel
        if ufunc.nin == 1:
            return lambda x, out: ufunc(x, out=out)
        return lambda x, y, out: ufunc(x, y, out=out)
    return None


def writes_elementwise(node: Node, kernel: Callable[..., Any]) -> bool:
    """Whether the out form reads each element before writing the same one, so
    it may write over an operand of the output's own shape (in place)."""
    if getattr(node.op, "elementwise", False) or node.name == "relu":
        return True
    return isinstance(kernel, np.ufunc) and not node.static
