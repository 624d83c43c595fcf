"""Elementwise fusion: each maximal group of elementwise nodes becomes one node
running one generated numba loop.

A group is grown backwards from a root (a node whose result leaves the group):
a producer joins when it is elementwise, all its readers are in the group, its
result is not a graph output, and it has as many elements as the root (so
nothing is computed twice for a broadcast). The fused node reads the group's
outside operands (values, broadcast as they were, and weak Python scalars) and
writes the root's value; intermediates live in registers, never in memory::

    %3 = add(%1, %c4) : float32[32, 512]           %5 = fused[add,relu](%1, %c4)
    %5 = relu(%3) : float32[32, 512]        ->

Its op carries the kernel's out form (``form(*arrays, out)``, planned
buffers, in place over a dying operand: ``elementwise = True``) and an
allocating kernel for eager calls. Each op's scalar code is exact numpy
(:mod:`eagerrt.backends.cpu.codegen`), so results equal eager ones.

Transcendental functions are the exception to "fusing is always faster":
numba calls libm one element at a time where numpy's loops are SIMD (tanh is
~40x slower per element), so such an op is fused only while the array is small
enough that the call it saves outweighs its slower loop.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...._core import config
from ....devices import cpu
from ....graph.cost_model import node_cost
from ....graph.ir import Graph, Node, Value
from ....graph.kernels import kernel_for, out_form_for
from ....ops import elementwise, manipulation
from ....ops.registry import GENERIC, Op, get_op, registering_backend_kernels
from ..codegen import (
    HEADER,
    NJIT,
    Operand,
    ScalarEmitter,
    index_expr,
    load_source,
    loop_nest,
    numba_dtype_ok,
)

__all__ = [
    "ElementwiseProgram",
    "build_program",
    "find_groups",
    "fusible",
    "make_op",
    "numba_signature",
    "replace_groups",
    "run",
]

# Extra nanoseconds per element of numba's scalar libm call over numpy's SIMD
# loop (measured, float32 and float64 alike within a factor of two).
_LIBM_EXTRA_NS: dict[str, float] = {
    "hypot": 2,
    **dict.fromkeys(("exp", "log", "log2", "log10"), 3),
    **dict.fromkeys(("sin", "cos"), 5),
    "expm1": 7,
    **dict.fromkeys(
        ("log1p", "tan", "asin", "acos", "atan", "asinh", "acosh", "atanh", "atan2", "power"), 8
    ),
    **dict.fromkeys(("logaddexp", "softplus"), 10),
    **dict.fromkeys(("sinh", "cosh"), 11),
    **dict.fromkeys(("tanh", "sigmoid", "silu"), 12),
}


@functools.cache
def _builtin_ops() -> dict[int, tuple[str, Any]]:
    """id(op) -> (name, its kernel as shipped), for the ops with scalar forms."""
    ops: dict[str, Op] = dict(elementwise.UFUNC_OPS)
    ops.update(
        relu=elementwise.relu,
        sigmoid=elementwise.sigmoid,
        gelu=elementwise.gelu,
        where=elementwise.where,
        clip=elementwise._clip_op,
        reciprocal=elementwise.reciprocal,
        silu=get_op("silu"),
        softplus=get_op("softplus"),
        astype=manipulation._astype,
    )
    # The CPU backend's kernel where it registered one, else the generic one.
    return {
        id(op): (name, op.kernels.get("cpu") or op.kernels.get(GENERIC)) for name, op in ops.items()
    }


def _operand(a: Any, var: str) -> Operand:
    if type(a) is Value:
        return Operand(var, a.dtype)
    return Operand(var, type(a), a)


def _key(a: Any) -> Any:
    """What tells operands apart: a value's id, a weak scalar's type and repr."""
    return a.id if type(a) is Value else ("s", type(a), repr(a))


def users_kernel(op: Op) -> bool:
    """Whether a kernel from outside eagerrt runs ``op`` on the CPU (its own, or
    a generic one): its semantics are its own, and passes leave it alone."""
    return bool({"cpu", GENERIC} & op.user_kernels)


def fusible(node: Node) -> bool:
    """Whether ``node`` is an elementwise op with an exact scalar form here: a
    built-in op with its shipped kernel, on the CPU, on numba-typed data."""
    known = _builtin_ops().get(id(node.op))
    if known is None or len(node.outputs) != 1:
        return False
    out = node.out
    if out.device is not cpu or not numba_dtype_ok(out.dtype):
        return False
    op = node.op
    if users_kernel(op) or op._specializers.get("cpu") or kernel_for(node) is not known[1]:
        return False  # a kernel someone registered: its semantics are its own
    for a in node.inputs:
        if type(a) is Value and (a.device is not out.device or not numba_dtype_ok(a.dtype)):
            return False
    operands = [_operand(a, f"x{i}") for i, a in enumerate(node.inputs)]
    return ScalarEmitter().node(known[0], operands, node.static, out.dtype) is not None


def elementwise_ok(node: Node) -> bool:
    """Fusible, and worth fusing at this size."""
    if not fusible(node):
        return False
    name = node.name
    extra = _LIBM_EXTRA_NS.get(name, 0.0)
    if name == "gelu" and node.static.get("approximate", "none") == "tanh":
        extra = _LIBM_EXTRA_NS["tanh"]
    if name == "power" and node.out.dtype.kind != "f":
        extra = 0.0  # integer power is a scalar loop in numpy too
    return extra * node.out.size <= config.op_overhead_ns


#: Nodes in one fused kernel at most (numba's compile time grows with it).
MAX_GROUP_NODES = 256


def same_size(group: list[Node], producer: Node) -> bool:
    """A producer joins only if it is computed once per output element (and
    the kernel is not too long to compile)."""
    return producer.out.size == group[0].out.size and len(group) < MAX_GROUP_NODES


# -- grouping ----------------------------------------------------------------------------
def find_groups(
    graph: Graph, eligible: Callable[[Node], bool], absorb: Callable[[list[Node], Node], bool]
) -> list[list[Node]]:
    """Maximal groups, each in execution order with its root last.

    Roots are taken from the end; a root pulls in eligible producers (latest
    first, so every reader of a producer has been decided when it is) whose
    results are read only inside the group and are not graph outputs. Every
    value leaving a group is then its root's, so a group can become one node at
    the root's place.
    """
    position = {id(n): i for i, n in enumerate(graph.nodes)}
    known: dict[int, bool] = {}

    def ok(node: Node) -> bool:  # each node judged once
        verdict = known.get(id(node))
        if verdict is None:
            verdict = known[id(node)] = eligible(node)
        return verdict

    users = graph.users()
    outputs = {v.id for v in graph.outputs}
    assigned: set[int] = set()
    groups: list[list[Node]] = []
    for root in reversed(graph.nodes):
        if id(root) in assigned or not ok(root):
            continue
        group = [root]
        members = {id(root)}
        seen: set[int] = set()
        heap: list[tuple[int, int, Node]] = []
        _push_producers(root, heap, seen, position)
        while heap:
            _, _, p = heapq.heappop(heap)
            if id(p) in assigned or len(p.outputs) != 1 or p.out.id in outputs:
                continue
            if not all(id(u) in members for u in users.get(p.out.id, ())):
                continue
            if not ok(p) or not absorb(group, p):
                continue
            group.append(p)
            members.add(id(p))
            _push_producers(p, heap, seen, position)
        assigned |= members
        groups.append(sorted(group, key=lambda n: position[id(n)]))
    groups.reverse()
    return groups


def _push_producers(
    node: Node, heap: list[tuple[int, int, Node]], seen: set[int], position: dict[int, int]
) -> None:
    """Queue the nodes computing ``node``'s operands, latest first."""
    for v in node.value_inputs():
        p = v.node
        if p is not None and id(p) not in seen and id(p) in position:
            seen.add(id(p))
            heapq.heappush(heap, (-position[id(p)], id(p), p))


def group_inputs(group: Iterable[Node]) -> list[Any]:
    """The operands a group reads from outside: values (once each) and weak
    scalars (once per distinct type and value), in first-use order."""
    seen: set[Any] = {v.id for n in group for v in n.outputs}  # made inside: not inputs
    inputs: list[Any] = []
    for node in group:
        for a in node.inputs:
            key = _key(a)
            if key not in seen:
                seen.add(key)
                inputs.append(a)
    return inputs


def replace_groups(graph: Graph, replacements: list[tuple[list[Node], Node]]) -> None:
    """Put each new node (computing its group's root's outputs) where the
    group's root was, the other members gone; one pass over the graph."""
    gone: set[int] = set()
    at_root: dict[int, Node] = {}
    for group, node in replacements:
        gone.update(id(n) for n in group)
        at_root[id(group[-1])] = node
    graph.nodes = [
        at_root.get(id(n), n) for n in graph.nodes if id(n) not in gone or id(n) in at_root
    ]


# -- code --------------------------------------------------------------------------------
@dataclass
class ElementwiseProgram:
    """A group's scalar code: element ``x<j>`` of input ``j`` in, ``result`` out."""

    names: list[str]
    inputs: list[Any]
    lines: list[str]
    result: str
    helpers: str
    out_shape: tuple[int, ...]
    out_dtype: np.dtype[Any]

    def element_reads(self, loop_vars: list[str], arrays: list[str] | None = None) -> list[str]:
        """Statements reading each input's element at the loop indices."""
        lines = []
        for j, a in enumerate(self.inputs):
            if type(a) is Value:
                name = arrays[j] if arrays is not None else f"a{j}"
                lines.append(f"x{j} = {name}{index_expr(a.shape, self.out_shape, loop_vars)}")
        return lines

    def kernel_source(self, from_out: int | None = None) -> str:
        """A module defining ``kernel(*inputs, out)`` over any shape with this
        structure (loop bounds come from ``out``). With ``from_out``, input
        ``from_out`` is not a parameter: it is read from ``out``, which the
        kernel overwrites in place. (Passing one array as both an input and
        ``out`` instead fails LLVM's run-time overlap check, and the loop runs
        unvectorized: measured 5 vs 2 ns per element for a float32 GELU.)"""
        ndim = len(self.out_shape)
        names = [f"a{j}" if j != from_out else "out" for j in range(len(self.inputs))]
        params = ", ".join([*(n for n in names if n != "out"), "out"])
        lines = [NJIT, f"def kernel({params}):"]
        lines += [f"    x{j} = a{j}" for j, a in enumerate(self.inputs) if type(a) is not Value]
        bounds = [f"n{d}" for d in range(ndim)]
        if ndim:
            lines.append(f"    {', '.join(bounds)}{',' if ndim == 1 else ''} = out.shape")

        def body(loop_vars: list[str], indent: str) -> list[str]:
            inner = self.element_reads(loop_vars, names) + self.lines
            store = f"out{index_expr(self.out_shape, self.out_shape, loop_vars)} = {self.result}"
            return [indent + line for line in [*inner, store]]

        lines += loop_nest(self.out_shape, body, bounds=bounds)
        return HEADER + self.helpers + "\n\n" + "\n".join(lines) + "\n"


def build_program(
    group: list[Node], inputs: list[Any] | None = None, biased: tuple[Value, Value] | None = None
) -> ElementwiseProgram | None:
    """The scalar code for ``group`` (None if some node has no exact form).
    With ``biased`` = (value, bias), both among ``inputs``, the group reads
    ``value + bias`` wherever it reads ``value``: a linear layer's bias added
    in its epilogue's pass instead of a pass of its own."""
    if inputs is None:
        inputs = group_inputs(group)
    emitter = ScalarEmitter()
    known = {_key(a): _operand(a, f"x{j}") for j, a in enumerate(inputs)}
    if biased is not None:
        value, bias = biased
        added = emitter.node("add", [known[value.id], known[bias.id]], {}, value.dtype)
        if added is None:
            return None
        known[value.id] = added
    names = []
    builtin = _builtin_ops()
    result: Operand | None = None
    for node in group:
        operands = [known[_key(a)] for a in node.inputs]
        name = builtin[id(node.op)][0]
        result = emitter.node(name, operands, node.static, node.out.dtype)
        if result is None:
            return None
        known[node.out.id] = result
        names.append(node.name)
    assert result is not None
    root = group[-1].out
    return ElementwiseProgram(
        names, inputs, emitter.lines, result.var, emitter.helpers_source(), root.shape, root.dtype
    )


def numba_signature(inputs: list[Any], out: Value) -> tuple[Any, ...]:
    """The argument types a plan will call the kernel with: constants as they
    are, graph inputs as tensors hold them (C-contiguous, read-only), computed
    values in C-contiguous buffers, scalars as numba types them. (A call with
    other types compiles another specialization then.)"""
    import numba

    def typeof(a: Any) -> Any:
        if type(a) is not Value:
            return numba.typeof(a)
        if a.is_const and isinstance(a.const, np.ndarray):
            return numba.typeof(a.const)
        readonly = a.node is None and not a.is_const
        return numba.types.Array(numba.from_dtype(a.dtype), a.ndim, "C", readonly=readonly)

    dtype = numba.from_dtype(out.dtype)
    return (*map(typeof, inputs), numba.types.Array(dtype, out.ndim, "C"))


def _allocating(form: Any, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Callable[..., Any]:
    # The op's shape is fixed (it is its rule's answer); the inputs' broadcast
    # is not it when a product is fused in (x @ W: (2, 784) and (784, 256)).
    def kernel(*arrays: Any) -> Any:
        out = np.empty(shape, dtype)
        form(*arrays, out)
        return out

    return kernel


_ops: dict[tuple[Any, ...], Op] = {}
_MAX_OPS = 4096


def make_op(
    name: str,
    form: Any,
    shape: tuple[int, ...],
    dtype: np.dtype[Any],
    cost: float,
    n_inputs: int,
    *,
    elementwise: bool,
    kernel: Callable[..., Any] | None = None,
    source: str = "",
) -> Op:
    """An op for a fused node: its out form ``form(*arrays, out)``, an allocating
    kernel for eager calls, a fixed cost (the graph's shapes are fixed)."""
    key = (name, id(form), shape, dtype, round(cost, 3), n_inputs, elementwise)
    op = _ops.get(key)
    if op is not None:
        return op
    op = Op(
        name,
        lambda *args: (shape, dtype),  # its rule: the graph's shapes are fixed
        cost=lambda *args, **static: cost,
        operands=n_inputs,
        weak_scalars=True,
        doc=f"Generated by graph fusion: {name}.",
    )
    with registering_backend_kernels():  # the backend's own op: passes may rewrite it
        op.register_kernel(GENERIC, kernel or _allocating(form, shape, dtype))
    op.out_form(GENERIC)(lambda node: form)
    op.elementwise = elementwise  # type: ignore[attr-defined]
    op.source = source  # type: ignore[attr-defined]
    if len(_ops) >= _MAX_OPS:  # many traces of many shapes: forget the oldest
        del _ops[next(iter(_ops))]
    _ops[key] = op
    return op


def compile_kernel(source: str, inputs: list[Any], out: Value, name: str = "kernel") -> Any:
    """Load ``source``'s ``name`` and compile it now for the plan's argument
    types (from numba's cache when it has them); None if numba refuses it."""
    try:
        fn = getattr(load_source(source), name)
        fn.compile(numba_signature(inputs, out))
    except Exception:  # never fail a compile over a fusion: the graph runs unfused
        return None
    return fn


def _zero_d_arrays(fn: Any, positions: list[int]) -> Any:
    """``fn`` taking the 0-d operands at ``positions`` as 0-d arrays: kernels may
    give numpy scalars for 0-d results (``x[2]``, ``np.take``, a 1-d ``@``),
    which the kernel, compiled for arrays, can't index."""

    def kernel(*arrays: Any) -> Any:
        arrays = tuple(np.asarray(a) if i in positions else a for i, a in enumerate(arrays))
        return fn(*arrays)

    return kernel


def fused_cost(group: list[Node]) -> float:
    """The members' costs less the call overheads fusion saves."""
    total = sum(node_cost(n) for n in group)
    return max(total - (len(group) - 1) * config.op_overhead_ns, config.op_overhead_ns)


def display_name(kind: str, names: list[str], limit: int = 8) -> str:
    shown = names if len(names) <= limit else [*names[:limit], f"... +{len(names) - limit}"]
    return f"{kind}[{','.join(shown)}]"


def fuse_group(group: list[Node]) -> Node | None:
    """The fused node replacing ``group`` (None if it can't be compiled)."""
    program = build_program(group)
    if program is None:
        return None
    root, inputs = group[-1], program.inputs
    source = program.kernel_source()
    fn = compile_kernel(source, inputs, root.out)
    if fn is None:
        return None
    scalars = [
        i for i, a in enumerate(inputs) if type(a) is Value and not a.shape and not a.is_const
    ]
    if scalars:
        fn = _zero_d_arrays(fn, scalars)
    op = make_op(
        display_name("fused", program.names),
        fn,
        root.out.shape,
        root.out.dtype,
        fused_cost(group),
        len(inputs),
        elementwise=True,
        source=source,
    )
    return Node(op, inputs, {}, [root.out], site=root.site)


def run(graph: Graph) -> int:
    """Fuse elementwise groups in place; returns how many fused nodes were made."""
    done = []
    for group in find_groups(graph, elementwise_ok, same_size):
        if len(group) == 1 and out_form_for(group[0], kernel_for(group[0])) is not None:
            continue  # a ufunc already writes into a planned buffer
        node = fuse_group(group)
        if node is not None:
            done.append((group, node))
    replace_groups(graph, done)
    return len(done)
